"""Reading a build's inputs from a bucket through the storage seam: the objects a URL names (one object, or
every object under a prefix) and a read-only, seekable file over one of them, fetched in ranged requests.

A corpus in `gs://` or `s3://` is then read with the same endpoints, credentials, retries and one-line
errors as the stores and runs there (`Location`'s standard environment), not through another client's.

>>> from meltemi.datastore.storage import Directory
>>> Directory("memory://doc/corpus").write_text("a.jsonl", '{"text": "one"}\\n{"text": "two"}\\n')
>>> list_objects("memory://doc/corpus")
['memory://doc/corpus/a.jsonl']
>>> with open_object("memory://doc/corpus/a.jsonl") as f:
...     f.readline(), f.seek(16), f.read()
(b'{"text": "one"}\\n', 16, b'{"text": "two"}\\n')
"""

from __future__ import annotations

import io
import os

from meltemi.datastore.storage.directory import Directory, first_contact, parent_and_key
from meltemi.datastore.storage.failures import storage_error
from meltemi.datastore.storage.location import Location

BLOCK = 4 << 20  # bytes per ranged request: a few requests per unit of build work


def list_objects(url: str | os.PathLike | Location) -> list[str]:
    """The object `url` names, or else every object under it as a prefix (hidden ones, whose path has a
    part starting with `.`, left out), as URLs, sorted; empty when there is neither."""
    location = Location.parse(url)
    directory, key = parent_and_key(location)
    if key and first_contact(directory.location, lambda parent: parent.exists(key)):  # fails fast
        return [str(location)]
    under = Directory(location)
    listed = first_contact(location, lambda prefix: prefix.list())
    return [under.where(k) for k in listed if not any(part.startswith(".") for part in k.split("/"))]


class ObjectReader(io.RawIOBase):
    """One object, read-only: `read`, `readinto` and `seek` (from the start or the current position), each
    read one ranged request of the object's bytes."""

    def __init__(self, url: str | os.PathLike | Location):
        super().__init__()
        self.location = Location.parse(url)
        self._directory, self._key = parent_and_key(self.location)
        self._position = 0
        self._size: int | None = None  # known once a read came back short: where the object ends

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation(f"{self.location}: an object is read from its start, not its end")
        if offset < 0:
            raise ValueError(f"{self.location}: cannot seek to byte {offset}")
        self._position = offset
        return offset

    def readinto(self, buffer) -> int:
        wanted = len(buffer)
        start = self._position
        if wanted == 0 or (self._size is not None and start >= self._size):
            return 0
        try:
            result = self._directory.kvstore.read(self._key, byte_range=slice(start, start + wanted)).result()
            data = None if result.state == "missing" else bytes(result.value)
        except ValueError as e:
            if not str(e).startswith("OUT_OF_RANGE"):
                raise storage_error(
                    str(self.location), f"reading bytes {start}..{start + wanted}", e
                ) from None
            data = self._directory.read_range(self._key, start)  # past the end: what is left (maybe nothing)
        if data is None:
            raise FileNotFoundError(f"{self.location}: no such object")
        buffer[: len(data)] = data
        self._position += len(data)
        if len(data) < wanted:
            self._size = self._position
        return len(data)


def open_object(url: str | os.PathLike | Location, block: int = BLOCK) -> io.BufferedReader:
    """A buffered, read-only, seekable binary file over the object `url` names (a `FileNotFoundError` when
    there is none, on the first read)."""
    return io.BufferedReader(ObjectReader(url), buffer_size=block)
