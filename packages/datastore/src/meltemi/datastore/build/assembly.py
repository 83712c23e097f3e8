"""Write a store's sharded arrays: in order, whole shards at a time, hashed as written, checked after.

Writing whole shards means TensorStore never rewrites one, and checking each shard's index after the
writes means readers can rely on the dense, in-order layout `ShardLayout` describes.
"""

import hashlib
import os
from collections import deque

import numpy as np

from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.layout import ShardLayout, create_array
from meltemi.datastore.storage import Directory

MAX_PENDING_WRITES = 4  # shards in flight, so memory stays bounded


def content_hash(
    dtype: np.dtype, tokens_sha256: str, offsets_sha256: str, weights_sha256: str | None = None
) -> str:
    """SHA-256 naming a store's contents: its token dtype and the SHA-256s of its tokens and offsets (and of
    a chat store's loss weights)."""
    named = f"{np.dtype(dtype).name}:{tokens_sha256}:{offsets_sha256}"
    named += "" if weights_sha256 is None else f":{weights_sha256}"
    return hashlib.sha256(named.encode()).hexdigest()


class ArrayWriter:
    """Writes a sharded array in order, a whole number of shards at a time, hashing the values written."""

    def __init__(self, out: Directory | str | os.PathLike, name: str, layout: ShardLayout):
        self.name, self.layout = name, layout
        self.array = create_array(_directory(out), name, layout)
        self.pending: list[np.ndarray] = []
        self.buffered = self.written = 0
        self.writes: deque = deque()
        self.sha256 = hashlib.sha256()

    def append(self, values: np.ndarray) -> None:
        self.pending.append(values)
        self.buffered += len(values)
        if self.buffered >= self.layout.shard:
            self._write(final=False)

    def _write(self, final: bool) -> None:
        data = np.concatenate(self.pending).astype(self.layout.dtype.newbyteorder("<"), copy=False)
        count = len(data) if final else len(data) // self.layout.shard * self.layout.shard
        if count:
            self.writes.append(self.array[self.written : self.written + count].write(data[:count]))
            self.sha256.update(memoryview(np.ascontiguousarray(data[:count])).cast("B"))
            while len(self.writes) > MAX_PENDING_WRITES:
                self.writes.popleft().result()
        self.pending, self.buffered, self.written = [data[count:]], len(data) - count, self.written + count

    def finish(self, remedy: str = "rebuild the store") -> str:
        """Write what is left, wait for every write, and give the SHA-256 of all the values; parts that do
        not add up are an error that ends with `remedy`."""
        self._write(final=True)
        while self.writes:
            self.writes.popleft().result()
        if self.written != self.layout.size:
            raise DatastoreError(
                f"{self.name}: assembled {self.written} values, expected {self.layout.size}; "
                f"the build's parts are inconsistent; {remedy}"
            )
        return self.sha256.hexdigest()


def _directory(out: Directory | str | os.PathLike) -> Directory:
    return out if isinstance(out, Directory) else Directory(out)


def check_shards(out: Directory | str | os.PathLike, name: str, layout: ShardLayout) -> None:
    """Check each shard holds its chunks densely and in order, as readers assume: its index, read from
    where it must start to the end of the object, is exactly the dense index (so the size is right too).

    The shards are already durable: TensorStore's `file` driver flushes each write to disk before it
    returns (`file_io_sync`), and an object store's PUT is durable once it returns.
    """
    out = _directory(out)
    for shard in range(layout.num_shards):
        key = f"{name}/{layout.shard_key(shard)}"
        index, size = layout.index_bytes(shard), layout.shard_file_size(shard)
        start = size - len(index)
        tail = out.read_range(key, start)
        if tail != index:
            found = "no shard" if tail is None else f"{len(tail)} other bytes from byte {start} on"
            raise DatastoreError(
                f"{out.where(key)}: TensorStore wrote shard {shard} of {name!r} in a layout this library "
                f"does not read (expected {size} bytes ending in the index of its chunks, in order; found "
                f"{found}); please report this with your tensorstore version"
            )
