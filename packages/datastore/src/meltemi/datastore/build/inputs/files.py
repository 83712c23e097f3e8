"""An input file as a build reads it: its URL, size and content hash (`Source`), the byte ranges units
read (`Piece`), and its bytes opened through the storage seam (a bucket) or fsspec (anything else),
decompressed as they stream out.
"""

import contextlib
import hashlib
import io
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import fsspec

from meltemi.datastore.build.inputs.compression import (
    Codec,
    codec_of,
    decompressed,
    object_path,
    uncompressed_name,
)
from meltemi.datastore.errors import InputError
from meltemi.datastore.storage import local_path_of, url_scheme

_HASH_BLOCK = 1 << 22


@dataclass(frozen=True)
class Source:
    """One input file: where it is, how big, the SHA-256 of its bytes, and where a big JSONL may be cut.

    `cuts` holds `(byte offset, lines before it)` of line starts that split the file into pieces of about
    the build's unit size, so one large JSONL file is tokenized by many workers.
    """

    url: str
    size: int
    sha256: str
    cuts: tuple[tuple[int, int], ...] = ()
    stamp: str | None = None  # what changes when the file does, read without its bytes (`stamp_of`)

    def pieces(self) -> list["Piece"]:
        """The file as consecutive pieces, split at `cuts` (one piece when there are none)."""
        starts = [(0, 0), *self.cuts]
        stops = [c for c, _ in self.cuts] + [None]
        return [
            Piece(self, start, stop, lines + 1) for (start, lines), stop in zip(starts, stops, strict=True)
        ]

    @property
    def name(self) -> str:
        """The URL with any credentials in it masked: what manifests, plans and messages record."""
        return redact(self.url)

    @property
    def kind(self) -> str:
        """The format of its uncompressed bytes, by name: `jsonl`, `json`, `parquet`, `arrow` or `text`.

        >>> Source("s3://b/shard.jsonl.zst", 0, "").kind, Source("/d/notes.md", 0, "").kind
        ('jsonl', 'text')
        >>> signed = Source("https://host/shard.jsonl.gz?X-Amz-Signature=f00", 0, "")
        >>> signed.kind, signed.compression, signed.name
        ('jsonl', 'gzip', 'https://host/shard.jsonl.gz?***')
        """
        name = uncompressed_name(self.url).lower()
        return next((kind for kind in _KINDS if name.endswith(f".{kind}")), "text")

    @property
    def compression(self) -> Codec | None:
        """The codec the whole file is compressed with (`compression.CODECS`), None when it is not."""
        return codec_of(self.url)


_KINDS = ("jsonl", "json", "parquet", "arrow")


# Query parameters that carry a credential: S3's and GCS's presigned URLs, Azure's SAS tokens, API keys.
_SECRET_PARAMETERS = frozenset({
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "awsaccesskeyid", "signature",
    "x-goog-signature", "x-goog-credential", "googleaccessid", "sig", "token", "access_token", "key",
    "api_key", "apikey",
})  # fmt: skip


def redact(url: str) -> str:
    """`url` (or any text) with the user and password of each URL masked, and the whole query of a web URL
    that carries a credential in it (a presigned URL's signature), so secrets stay out of records; a URL
    signed again keeps its record.

    >>> redact("https://user:secret@example.com/a.jsonl"), redact("/data/a.jsonl")
    ('https://***@example.com/a.jsonl', '/data/a.jsonl')
    >>> redact("https://b.s3.amazonaws.com/a.jsonl?X-Amz-Date=20261202&X-Amz-Signature=f00"), redact("http://h/a?page=2")
    ('https://b.s3.amazonaws.com/a.jsonl?***', 'http://h/a?page=2')
    """
    masked = re.sub(r"([a-zA-Z][\w+.-]*://)[^/@\s'\"]*@", r"\1***@", url)
    return re.sub(r"(\bhttps?://[^\s'\"?#]*\?)([^\s'\"#]*)", _masked_query, masked, flags=re.IGNORECASE)


def _masked_query(match: re.Match) -> str:
    names = {name.lower() for name, _ in urllib.parse.parse_qsl(match.group(2), keep_blank_values=True)}
    return match.group(1) + "***" if names & _SECRET_PARAMETERS else match.group(0)


@dataclass(frozen=True)
class Piece:
    """Bytes `[start, stop)` of a source (`stop` None: to its end), whose first line is `first_line`."""

    source: Source
    start: int
    stop: int | None
    first_line: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop is None

    @property
    def size(self) -> int:
        return (self.source.size if self.stop is None else self.stop) - self.start


_BUCKETS = ("gs", "s3")  # read through the storage seam (its credentials and errors); the rest via fsspec


def _in_bucket(url: str) -> bool:
    return url_scheme(url) in _BUCKETS


def open_input(url: str, whole: bool = False) -> fsspec.core.OpenFile | io.BufferedReader | io.BytesIO:
    """A binary file of the input `url`: an object in a bucket through the storage seam (read in ranged
    requests, or `whole` into memory, for a reader that seeks from the end), anything else through fsspec."""
    if not _in_bucket(url):
        return fsspec.open(url, "rb")
    from meltemi.datastore.storage import read_object
    from meltemi.datastore.storage.inputs import open_object

    if not whole:
        return open_object(url)
    data = read_object(url)
    if data is None:
        raise FileNotFoundError(url)
    return io.BytesIO(data)


@contextlib.contextmanager
def open_source(source: Source, whole: bool = False) -> Iterator[BinaryIO]:
    """A binary file of `source`'s uncompressed bytes (`open_input`'s, decompressed as they are read); with
    `whole`, seekable, for a reader that seeks from the end (a compressed one is decompressed into memory).

    >>> import gzip, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt.gz"
    >>> _ = path.write_bytes(gzip.compress(b"hello"))
    >>> with open_source(describe_source(str(path))) as f:
    ...     f.read()
    b'hello'
    """
    compressed = source.compression is not None  # streamed, then held whole once decompressed
    with (
        open_input(source.url, whole=whole and not compressed) as raw,
        decompressed(raw, source.compression, source.name) as f,
    ):
        yield io.BytesIO(f.read()) if whole and compressed else f


def stamp_of(url: str) -> str | None:
    """What changes when the file at `url` does, found without reading its bytes: a local file's size and
    modification time (ns), a bucket object's generation (GCS) or ETag (S3); None for other URLs.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("one")
    >>> stamp_of(str(path)) == stamp_of(str(path)), stamp_of(str(path)).startswith("local:3:")
    (True, True)
    """
    local = local_path_of(url)
    if local is not None:
        try:
            status = local.stat()
        except OSError:
            return None
        return f"local:{status.st_size}:{status.st_mtime_ns}"
    if not _in_bucket(url):
        return None
    from meltemi.datastore.storage.directory import parent_and_key

    directory, key = parent_and_key(url)
    try:
        found = directory.kvstore.read(key, byte_range=slice(0, 1)).result()
    except ValueError:  # an empty object has no first byte
        found = directory.kvstore.read(key).result()
    if found.state != "value":
        return None
    return f"object:{bytes(found.stamp.generation).hex()}"


def cut_at_lines(url: str) -> bool:
    """Whether a file may be cut into pieces at line starts: a JSON Lines file, not compressed (its name
    says so; a presigned URL's query aside).

    >>> cut_at_lines("s3://b/a.jsonl"), cut_at_lines("https://h/a.JSONL?sig=1"), cut_at_lines("a.jsonl.gz")
    (True, True, False)
    """
    return object_path(url).lower().endswith(".jsonl")


def describe_source(url: str, split_bytes: int | None = None, block_bytes: int = _HASH_BLOCK) -> Source:
    """Size and content hash of one file (read once, in blocks); a plain JSONL file larger than
    `split_bytes` also gets line-aligned cuts about every `split_bytes`. Its `stamp` is taken first, so a
    file changed while it is read is read again by the next build that finds another stamp."""
    stamp = stamp_of(url)
    digest = hashlib.sha256()
    size = lines = 0
    cuts: list[tuple[int, int]] = []
    splitting = split_bytes is not None and cut_at_lines(url)
    next_cut = split_bytes if splitting else None
    try:
        with open_input(url) as f:
            while block := f.read(block_bytes):
                digest.update(block)
                while next_cut is not None and next_cut < size + len(block):
                    newline = block.find(b"\n", max(0, next_cut - size))
                    if newline < 0:
                        break
                    cuts.append((size + newline + 1, lines + block.count(b"\n", 0, newline + 1)))
                    next_cut = size + newline + 1 + split_bytes
                lines += block.count(b"\n")
                size += len(block)
    except OSError as e:
        raise InputError(f"{redact(url)}: cannot be read ({redact(str(e))})") from None
    cuts = [(offset, before) for offset, before in cuts if offset < size]
    return Source(url=url, size=size, sha256=digest.hexdigest(), cuts=tuple(cuts), stamp=stamp)
