"""Inputs compressed whole, known by the file name's last suffix and read as a stream of their
uncompressed bytes: `.gz` (gzip), `.zst` or `.zstd` (Zstandard, as DCLM's shards are), `.bz2` and `.xz`.
The name before the suffix says the format (`a.jsonl.zst` is JSON Lines), as datasets and fsspec read it.
Zstandard is read through pyarrow's codec, the rest through the standard library; a file that is not what
its suffix says, or that ends early, is an `InputError` naming it.

>>> import io, gzip
>>> codec_of("shard-0001.jsonl.zst"), uncompressed_name("shard-0001.jsonl.zst"), codec_of("a.jsonl")
('zstd', 'shard-0001.jsonl', None)
>>> with decompressed(io.BytesIO(gzip.compress(b"one\\ntwo\\n")), "gzip", "a.txt.gz") as f:
...     f.readlines()
[b'one\\n', b'two\\n']
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import lzma
import zlib
from collections.abc import Iterator
from typing import BinaryIO, Literal

from meltemi.datastore.errors import InputError
from meltemi.datastore.storage import url_scheme

Codec = Literal["gzip", "zstd", "bz2", "xz"]
CODECS: dict[str, Codec] = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}
_DAMAGED = (OSError, EOFError, zlib.error, lzma.LZMAError)  # what a codec raises on data it cannot read
_BLOCK = 1 << 20


def codec_of(name: str) -> Codec | None:
    """The codec a file named `name` is compressed with, by its last suffix; None when it is not.

    >>> codec_of("s3://b/part-00.json.gz"), codec_of("notes.txt")
    ('gzip', None)
    """
    return CODECS.get(_last_suffix(name))


def uncompressed_name(name: str) -> str:
    """`name` without its compression suffix: the name that says what the uncompressed bytes are.

    >>> uncompressed_name("/data/a.jsonl.gz"), uncompressed_name("https://host/a.jsonl.zst?sig=f00")
    ('/data/a.jsonl', 'https://host/a.jsonl')
    """
    path, suffix = object_path(name), _last_suffix(name)
    return path[: -len(suffix)] if suffix in CODECS else path


def object_path(name: str) -> str:
    """The part of a path or URL that names the object: a web URL without its query and fragment (a
    presigned ``https://host/a.jsonl.gz?X-Amz-Signature=...`` names ``a.jsonl.gz``); anything else as given
    (a bucket's key may hold a ``?``).

    >>> object_path("https://host/d/a.jsonl.gz?X-Amz-Signature=f00#top"), object_path("s3://b/a?.txt")
    ('https://host/d/a.jsonl.gz', 's3://b/a?.txt')
    """
    if url_scheme(name) in ("http", "https"):
        return name.partition("#")[0].partition("?")[0]
    return name


def _last_suffix(name: str) -> str:
    base = object_path(name).rpartition("/")[2].lower()
    dot = base.rfind(".")
    return base[dot:] if dot > 0 else ""


@contextlib.contextmanager
def decompressed(raw: BinaryIO, codec: Codec | None, name: str) -> Iterator[BinaryIO]:
    """A buffered binary file of `raw`'s uncompressed bytes (`raw` itself when `codec` is None), read as
    they are asked for; data the codec cannot read, raised within the block, becomes an `InputError`
    naming `name`. Concatenated gzip members and Zstandard frames read as one stream, as their tools
    write them.

    >>> import io
    >>> with decompressed(io.BytesIO(b"not gzip at all"), "gzip", "a.jsonl.gz") as f:
    ...     f.read()
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.InputError: a.jsonl.gz: not a gzip file, or a damaged one (Not a gzipped ...)
    """
    if codec is None:
        yield raw
        return
    try:
        with _stream(raw, codec) as stream:
            yield stream
    except FileNotFoundError:
        raise
    except _DAMAGED as e:
        raise InputError(f"{name}: not a {_LABELS[codec]} file, or a damaged one ({e})") from None


_LABELS: dict[Codec, str] = {"gzip": "gzip", "zstd": "Zstandard", "bz2": "bzip2", "xz": "xz"}


def _stream(raw: BinaryIO, codec: Codec) -> BinaryIO:
    if codec == "gzip":
        return gzip.open(raw, "rb")
    if codec == "bz2":
        return bz2.open(raw, "rb")
    if codec == "xz":
        return lzma.open(raw, "rb")
    import pyarrow as pa

    return io.BufferedReader(_ArrowStream(pa.CompressedInputStream(raw, "zstd")), buffer_size=_BLOCK)


class _ArrowStream(io.RawIOBase):
    """pyarrow's decompressing stream (which reads in blocks but has no lines) as a raw file that a
    `BufferedReader` reads lines from."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()
