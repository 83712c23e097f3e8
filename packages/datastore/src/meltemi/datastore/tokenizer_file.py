"""A `tokenizer.json` read from wherever it lies: the one way every package reads a tokenizer file.

A local path or a `file://`, `gs://`, `s3://` or `memory://` URL is read through the storage seam (its
endpoints, credentials and errors); a URL only fsspec reads (`https://...`) through fsspec, the one adapter
for schemes the seam does not write. Parsed tokenizers are kept by content hash, so a process parses each
one once however many stages ask for it.

>>> import tempfile
>>> from meltemi.datastore import corpora
>>> path = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tempfile.mkdtemp() + "/t.json")
>>> load_tokenizer(path).get_vocab_size() == load_tokenizer(f"file://{path}").get_vocab_size()
True
"""

from __future__ import annotations

import os

import fsspec
from tokenizers import Tokenizer

from meltemi.datastore.build.inputs.sources import redact
from meltemi.datastore.errors import TokenizerFileError
from meltemi.datastore.layout import canonical_tokenizer_hash
from meltemi.datastore.storage import SCHEMES, Location, read_object, url_scheme

_NOT_A_TOKENIZER = "not a Hugging Face tokenizer.json"
_PARSED: dict[str, Tokenizer] = {}  # by the canonical hash of the file's JSON


def read_tokenizer_text(location: str | os.PathLike | Location) -> str:
    """The text of the `tokenizer.json` at `location`; a `TokenizerFileError` naming it when there is none.

    >>> read_tokenizer_text("memory://doc/none/tokenizer.json")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.TokenizerFileError: tokenizer 'memory://doc/none/tokenizer.json': no such file
    """
    where = _shown(location)
    try:
        data = _read_bytes(location)
    except FileNotFoundError:
        data = None
    except (OSError, ValueError, ImportError) as error:  # ImportError: fsspec's protocol is not installed
        raise TokenizerFileError(f"tokenizer {where!r}: cannot be read ({redact(str(error))})") from None
    if data is None:
        raise TokenizerFileError(f"tokenizer {where!r}: no such file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TokenizerFileError(f"tokenizer {where!r}: {_NOT_A_TOKENIZER} ({error})") from None


def tokenizer_digest(text: str, where: str) -> str:
    """The canonical hash of the tokenizer JSON `text` (what a store records); a `TokenizerFileError` naming
    `where` when `text` is not JSON.

    >>> tokenizer_digest("hello world", "a.txt")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.TokenizerFileError: tokenizer 'a.txt': not a Hugging Face tokenizer.json ...
    """
    try:
        return canonical_tokenizer_hash(text)
    except ValueError as error:
        raise TokenizerFileError(f"tokenizer {where!r}: {_NOT_A_TOKENIZER} ({error})") from None


def parse_tokenizer(text: str, where: str, digest: str | None = None) -> Tokenizer:
    """The tokenizer in the JSON `text` (parsed once per process; `digest`, its canonical hash when known);
    a `TokenizerFileError` naming `where`."""
    digest = digest or tokenizer_digest(text, where)
    if digest not in _PARSED:
        try:
            _PARSED[digest] = Tokenizer.from_str(text)
        except Exception as error:  # tokenizers raises a bare Exception for what it cannot parse
            raise TokenizerFileError(f"tokenizer {where!r}: {_NOT_A_TOKENIZER} ({error})") from None
    return _PARSED[digest]


def load_tokenizer(location: str | os.PathLike | Location) -> Tokenizer:
    """The tokenizer in the `tokenizer.json` at `location` (a path or URL); a `TokenizerFileError` naming it
    when it is missing or not a tokenizer. The object is shared by every caller in the process: a caller
    that changes it (adds tokens, sets padding) works on `Tokenizer.from_str(tokenizer.to_str())`."""
    return parse_tokenizer(read_tokenizer_text(location), _shown(location))


def _read_bytes(location: str | os.PathLike | Location) -> bytes | None:
    if isinstance(location, Location) or (url_scheme(os.fspath(location)) or "file") in SCHEMES:
        return read_object(location)
    with fsspec.open(os.fspath(location), "rb") as f:
        return f.read()


def _shown(location: str | os.PathLike | Location) -> str:
    return redact(str(location) if isinstance(location, Location) else os.fspath(location))
