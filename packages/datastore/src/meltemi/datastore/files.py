"""Byte-range reads of a store's files: positional reads of local files, or TensorStore for URLs.

Both give the same answers; they differ in reach and speed. A local store is read with `os.pread` on
file descriptors kept open (a few microseconds per range: the small random reads a shuffled batch makes
cost little more than copying from a memmap). A store named by a URL (`file://`, `gs://`, `s3://`, ...)
is read through TensorStore's key-value stores (the storage seam's, with its endpoints, credentials and
retries), every range of a request issued at once in one batch.
"""

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import tensorstore as ts

from meltemi.datastore.storage import Directory, Location, url_scheme

Range = tuple[str, int, int]
"""A key (a path relative to the store), and the start and stop byte to read from it."""

Outcome = int | str
"""What a ranged read gave: the number of bytes read (fewer when the file is shorter), or why it failed."""


class StoreFiles(Protocol):
    """The files of one store, read whole or by byte range."""

    def where(self, key: str) -> str:
        """The file's path or URL, for messages."""
        ...

    def read(self, key: str) -> bytes | None:
        """The whole file, or None when it does not exist."""
        ...

    def start_reads(self, ranges: Sequence[Range], buffer: memoryview) -> Callable[[], list[Outcome]]:
        """Start reading `ranges` into `buffer`, one after another; the returned function waits for them.

        It gives each range's outcome, in order.
        """
        ...


def is_url(location: str | os.PathLike) -> bool:
    return url_scheme(location) is not None


def open_files(location: str | os.PathLike | Location) -> StoreFiles:
    """A URL is read through TensorStore, a local path with positional reads; an unknown scheme or a
    malformed URL is a `StorageError`.

    >>> type(open_files("/tmp/store")).__name__, type(open_files("memory://store")).__name__
    ('LocalFiles', 'TensorStoreFiles')
    """
    if isinstance(location, Location) or is_url(location):
        return TensorStoreFiles(location)
    return LocalFiles(Path(location))


class CountingFiles:
    """Another `StoreFiles`'s reads, counted per object: `requests` (whole reads and ranges) and `bytes`.

    >>> counted = CountingFiles(open_files("memory://counting"))
    >>> counted.read("manifest.json") is None, counted.objects, counted.total_bytes
    (True, 1, 0)
    """

    def __init__(self, files: StoreFiles):
        self.files = files
        self.requests: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    @property
    def objects(self) -> int:
        """How many distinct objects were read (or asked for)."""
        return len(self.requests)

    @property
    def total_bytes(self) -> int:
        return self.bytes.total()

    def reset(self) -> None:
        self.requests, self.bytes = Counter(), Counter()

    def where(self, key: str) -> str:
        return self.files.where(key)

    def read(self, key: str) -> bytes | None:
        self.requests[key] += 1
        data = self.files.read(key)
        self.bytes[key] += 0 if data is None else len(data)
        return data

    def start_reads(self, ranges: Sequence[Range], buffer: memoryview) -> Callable[[], list[Outcome]]:
        self.requests.update(key for key, _, _ in ranges)
        wait = self.files.start_reads(ranges, buffer)

        def outcomes() -> list[Outcome]:
            done = wait()
            for (key, _, _), outcome in zip(ranges, done, strict=True):
                self.bytes[key] += outcome if isinstance(outcome, int) else 0
            return done

        return outcomes


class LocalFiles:
    """A local directory, read with `os.pread` on descriptors kept open (the `max_open` most recent).

    A shuffled corpus of millions of shards touches a few hundred per batch, so descriptors are recycled
    least-recently-used first; a lock held across each read keeps one thread from closing a descriptor
    another is reading.
    """

    def __init__(self, root: Path, max_open: int = 256):
        self._descriptors: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.root, self.max_open = root, max_open

    def where(self, key: str) -> str:
        return str(self.root / key)

    def read(self, key: str) -> bytes | None:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            return None

    def start_reads(self, ranges: Sequence[Range], buffer: memoryview) -> Callable[[], list[Outcome]]:
        outcomes, position = [], 0
        with self._lock:
            for key, start, stop in ranges:
                outcomes.append(self._read_range(key, start, buffer[position : position + stop - start]))
                position += stop - start
        return lambda: outcomes

    def _read_range(self, key: str, start: int, into: memoryview) -> Outcome:
        try:
            descriptor = self._descriptor(key)
        except OSError as e:
            return "the file is missing" if isinstance(e, FileNotFoundError) else e.strerror or str(e)
        try:
            return os.preadv(descriptor, [into], start)
        except OSError as e:
            return e.strerror or str(e)

    def _descriptor(self, key: str) -> int:
        descriptor = self._descriptors.get(key)
        if descriptor is not None:
            self._descriptors.move_to_end(key)
            return descriptor
        descriptor = os.open(self.root / key, os.O_RDONLY)
        self._descriptors[key] = descriptor
        while len(self._descriptors) > self.max_open:
            os.close(self._descriptors.popitem(last=False)[1])
        return descriptor

    @property
    def open_descriptors(self) -> int:
        return len(self._descriptors)

    def close(self) -> None:
        with self._lock:
            for descriptor in self._descriptors.values():
                os.close(descriptor)
            self._descriptors.clear()

    def __del__(self):
        self.close()


class TensorStoreFiles:
    """A store at a URL of the storage seam (`file:///abs/path`, `gs://bucket/path`, `s3://...`, `memory://`)."""

    def __init__(self, location: str | os.PathLike | Location):
        self.directory = Directory(location)
        self.kvstore = self.directory.kvstore

    def where(self, key: str) -> str:
        return self.directory.where(key)

    def read(self, key: str) -> bytes | None:
        return self.directory.read_bytes(key)

    def start_reads(self, ranges: Sequence[Range], buffer: memoryview) -> Callable[[], list[Outcome]]:
        with ts.Batch() as batch:
            futures = [
                self.kvstore.read(key, byte_range=slice(start, stop), batch=batch)
                for key, start, stop in ranges
            ]

        def outcomes() -> list[Outcome]:
            done, position = [], 0
            for (_, start, stop), future in zip(ranges, futures, strict=True):
                done.append(_copy_result(future, buffer[position : position + stop - start]))
                position += stop - start
            return done

        return outcomes


def _copy_result(future, into: memoryview) -> Outcome:
    try:
        result = future.result()
    except Exception as e:
        return str(e)
    if result.state == "missing":
        return "the file is missing"
    size = min(len(result.value), len(into))
    into[:size] = result.value[:size]
    return size
