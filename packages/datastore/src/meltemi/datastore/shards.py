"""Read chunks of a sharded store array: runs of adjacent chunks in one ranged read, each chunk checked.

The builder guarantees the dense layout `ShardLayout` describes, so no shard index is read: a run of
chunks `a..b` of a shard is the byte range `[a * chunk_bytes, (b + 1) * chunk_bytes)` of its file. Every
chunk's values are followed by their CRC-32C, checked (unless switched off) before any value is used.
"""

from collections.abc import Callable

import numpy as np

from meltemi.datastore.errors import IntegrityError
from meltemi.datastore.files import Range, StoreFiles
from meltemi.datastore.layout import CHECKSUM_BYTES, ShardLayout, crc32c


class ShardedArray:
    """One of the store's arrays: chunk reads by index, and element reads by range.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from meltemi.datastore.files import LocalFiles
    >>> from meltemi.datastore.build.assembly import ArrayWriter
    >>> root, layout = Path(tempfile.mkdtemp()), ShardLayout(10, np.dtype(np.uint32), chunk=4, shard=8)
    >>> writer = ArrayWriter(root, "squares", layout)
    >>> writer.append(np.arange(10, dtype=np.uint32) ** 2)
    >>> _ = writer.finish()
    >>> array = ShardedArray(LocalFiles(root), "squares", layout, verify=True)
    >>> array.read(3, 6).tolist(), array.read_chunks(np.array([2])).tolist()
    ([9, 16, 25], [64, 81, 0, 0])
    """

    def __init__(self, files: StoreFiles, name: str, layout: ShardLayout, verify: bool):
        self.files, self.name, self.layout, self.verify = files, name, layout, verify
        self.dtype = layout.dtype
        self._stored = layout.dtype.newbyteorder("<")

    @property
    def size(self) -> int:
        return self.layout.size

    def start_chunks(self, chunks: np.ndarray) -> Callable[[], np.ndarray]:
        """Start reading the sorted, distinct `chunks`; the returned function gives their values, joined.

        Chunk `chunks[k]` is `values[k * chunk : (k + 1) * chunk]` (the last chunk of the array is padded).
        Adjacent chunks of one shard are read as one range, all ranges into one buffer, and all are
        issued before any is awaited.
        """
        chunks = np.asarray(chunks, np.int64)
        if chunks.size == 0:
            return lambda: np.zeros(0, self.dtype)
        read, width = self._start(chunks), self.layout.chunk_bytes - CHECKSUM_BYTES
        return lambda: read()[:, :width].view(self._stored).reshape(-1)

    def read_all(self) -> np.ndarray:
        """All the array's values, one ranged read per shard, packed in place in the buffer read into: an
        array held whole (a store's `offsets_index`) costs its stored size in memory once, not twice.

        >>> import tempfile
        >>> from pathlib import Path
        >>> from meltemi.datastore.files import LocalFiles
        >>> from meltemi.datastore.build.assembly import ArrayWriter
        >>> root, layout = Path(tempfile.mkdtemp()), ShardLayout(10, np.dtype(np.uint64), chunk=4, shard=8)
        >>> writer = ArrayWriter(root, "odd", layout)
        >>> writer.append(np.arange(1, 20, 2, dtype=np.uint64))
        >>> _ = writer.finish()
        >>> ShardedArray(LocalFiles(root), "odd", layout, verify=True).read_all().tolist()
        [1, 3, 5, 7, 9, 11, 13, 15, 17, 19]
        """
        layout = self.layout
        if layout.size == 0:
            return np.zeros(0, self._stored)
        buffer = self._start(np.arange(layout.num_chunks))()
        width, packed = layout.chunk * self.dtype.itemsize, buffer.reshape(-1)
        for k in range(1, len(buffer)):  # each chunk's values moved down over the checksums before them
            packed[k * width : (k + 1) * width] = buffer[k, :width]
        return packed[: layout.size * self.dtype.itemsize].view(self._stored)

    def _start(self, chunks: np.ndarray) -> Callable[[], np.ndarray]:
        """Start reading `chunks` (sorted, distinct, some); the returned function gives them as read, a row
        of `chunk_bytes` each (values, then CRC-32C), every range read whole and, unless switched off,
        every checksum checked."""
        layout = self.layout
        per_shard, chunk_bytes = layout.chunks_per_shard, layout.chunk_bytes
        breaks = np.flatnonzero((np.diff(chunks) != 1) | (np.diff(chunks // per_shard) != 0)) + 1
        firsts, lasts = chunks[np.r_[0, breaks]], chunks[np.r_[breaks - 1, chunks.size - 1]]
        local = firsts - firsts // per_shard * per_shard
        ranges: list[Range] = [
            (f"{self.name}/c/{shard}", start, stop)
            for shard, start, stop in zip(
                (firsts // per_shard).tolist(),
                (local * chunk_bytes).tolist(),
                ((local + lasts - firsts + 1) * chunk_bytes).tolist(),
                strict=True,
            )
        ]
        buffer = np.empty((chunks.size, chunk_bytes), np.uint8)
        outcomes = self.files.start_reads(ranges, memoryview(buffer).cast("B"))

        def checked() -> np.ndarray:
            for (key, start, stop), first, outcome in zip(ranges, firsts.tolist(), outcomes(), strict=True):
                if outcome != stop - start:
                    self._failed(key, first, (stop - start) // chunk_bytes, outcome)
            if self.verify:
                self._verify(buffer, chunks)
            return buffer

        return checked

    def read_chunks(self, chunks: np.ndarray) -> np.ndarray:
        """`start_chunks(chunks)()`: the values of the sorted, distinct `chunks`, joined."""
        return self.start_chunks(chunks)()

    def read(self, start: int, stop: int) -> np.ndarray:
        """Elements `[start, stop)`."""
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"range [{start}, {stop}) is outside {self.name!r} of size {self.size}")
        if start == stop:
            return np.zeros(0, self.dtype)
        chunk = self.layout.chunk
        first = start // chunk
        values = self.read_chunks(np.arange(first, (stop - 1) // chunk + 1))
        return values[start - first * chunk : stop - first * chunk]

    def _failed(self, key: str, first: int, count: int, outcome: int | str) -> None:
        where = self.files.where(key)
        if isinstance(outcome, str):
            chunks = f"chunk {first}" if count == 1 else f"chunks {first}..{first + count - 1}"
            raise IntegrityError(
                f"{where}: {chunks} of {self.name!r} cannot be read ({outcome}); "
                "rebuild the store or restore the file"
            )
        raise IntegrityError(
            f"{where}: chunk {first + outcome // self.layout.chunk_bytes} of {self.name!r} is truncated "
            f"(the file ends {count * self.layout.chunk_bytes - outcome} bytes short); "
            "rebuild the store or restore the file"
        )

    def _verify(self, buffer: np.ndarray, chunks: np.ndarray) -> None:
        """Check every chunk's CRC-32C against the one stored after it; name the first that differs."""
        width = buffer.shape[1] - CHECKSUM_BYTES
        actual = np.array([crc32c(row.tobytes()) for row in buffer[:, :width]], np.uint32)
        stored = buffer[:, width:].copy().view("<u4").ravel()
        bad = np.flatnonzero(actual != stored)
        if bad.size:
            chunk = int(chunks[bad[0]])
            local = chunk % self.layout.chunks_per_shard
            key = f"{self.name}/{self.layout.shard_key(chunk // self.layout.chunks_per_shard)}"
            raise IntegrityError(
                f"{self.files.where(key)}: chunk {chunk} of {self.name!r} (chunk {local} of this shard) is "
                f"corrupted (CRC-32C {actual[bad[0]]:08x}, stored {stored[bad[0]]:08x}); "
                "rebuild the store or restore the file"
            )
