"""Assemble the parts into a store's sharded arrays: whole shards at a time, hashed as written, checked after.

Each array is cut into segments of `SEGMENT_SHARDS` shards, and each segment is one task: it reads the
parts that hold its values (where they go follows from the parts' counts alone, `part_spans`), writes its
shards, checks them, and hands back the SHA-256s of the hash blocks (`layout.HASH_BLOCK` values) that begin
in its shards, reading the rest of the last one from the parts; the array's SHA-256 is composed from its
blocks' (`layout.array_digest`). So tasks on any number of machines assemble a store of any size, and make
the same bytes and hashes as one process, whatever the shard size.
Writing whole shards means TensorStore never rewrites one, and checking each shard's index after the
writes means readers can rely on the dense, in-order layout `ShardLayout` describes.
"""

import hashlib
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorstore as ts

from meltemi.datastore.build.records import PartSummary
from meltemi.datastore.build.units import load_array, part_keys, weights_key
from meltemi.datastore.errors import DatastoreError, Remedy
from meltemi.datastore.layout import (
    HASH_BLOCK,
    LOSS_WEIGHTS,
    OFFSETS,
    OFFSETS_CHUNK,
    SEGMENT_SHARDS,
    ShardLayout,
    create_array,
)
from meltemi.datastore.storage import Directory, storage_context

MAX_PENDING_WRITES = 4  # shards in flight, so memory stays bounded


def content_hash(
    dtype: np.dtype, tokens_sha256: str, offsets_sha256: str, weights_sha256: str | None = None
) -> str:
    """SHA-256 naming a store's contents: its token dtype and the SHA-256s of its tokens and offsets (and of
    a chat store's loss weights)."""
    named = f"{np.dtype(dtype).name}:{tokens_sha256}:{offsets_sha256}"
    named += "" if weights_sha256 is None else f":{weights_sha256}"
    return hashlib.sha256(named.encode()).hexdigest()


REBUILD_STORE = Remedy("; rebuild the store")  # what fixes parts that do not add up


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

    def finish(self, remedy: Remedy = REBUILD_STORE) -> str:
        """Write what is left, wait for every write, and give the SHA-256 of all the values; parts that do
        not add up are an error whose remedy is `remedy`."""
        self._write(final=True)
        while self.writes:
            self.writes.popleft().result()
        if self.written != self.layout.size:
            raise DatastoreError(
                f"{self.name}: assembled {self.written} values, expected {self.layout.size}; "
                "the build's parts are inconsistent",
                remedies=(remedy,),
            )
        return self.sha256.hexdigest()


def _directory(out: Directory | str | os.PathLike) -> Directory:
    return out if isinstance(out, Directory) else Directory(out)


def open_array(root: Directory, array: str) -> ts.TensorStore:
    """An array `create_array` made, opened for writing its shards."""
    return ts.open(root.array_spec(array) | {"open": True}, context=storage_context()).result()


def tokens_key(unit: int) -> str:
    """The key of a part's tokens in the build's directory."""
    return part_keys(unit)[0]


def lengths_key(unit: int) -> str:
    """The key of a part's document lengths in the build's directory."""
    return part_keys(unit)[1]


def check_shards(
    out: Directory | str | os.PathLike, name: str, layout: ShardLayout, shards: range | None = None
) -> None:
    """Check each shard holds its chunks densely and in order, as readers assume: its index, read from
    where it must start to the end of the object, is exactly the dense index (so the size is right too).

    The shards are already durable: TensorStore's `file` driver flushes each write to disk before it
    returns (`file_io_sync`), and an object store's PUT is durable once it returns.
    """
    out = _directory(out)
    for shard in range(layout.num_shards) if shards is None else shards:
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


@dataclass(frozen=True)
class PartSpan:
    """Where one part's values go in the store: its first token and document, and how many of each."""

    unit: int
    first_token: int
    tokens: int
    first_document: int
    documents: int


def part_spans(summaries: Sequence[PartSummary]) -> list[PartSpan]:
    """Each part's place in the store, from the parts' counts alone (in unit order).

    >>> [s.first_token for s in part_spans([PartSummary(0, 2, 5), PartSummary(1, 1, 3)])]
    [0, 5]
    """
    spans, tokens, documents = [], 0, 0
    for summary in summaries:
        spans.append(PartSpan(summary.unit, tokens, summary.tokens, documents, summary.documents))
        tokens, documents = tokens + summary.tokens, documents + summary.documents
    return spans


@dataclass(frozen=True)
class Segment:
    """One assembly task's share of an array: it writes shards `[first_shard, stop_shard)`
    (`SEGMENT_SHARDS` of them, fewer at the end) and hashes the hash blocks that begin in them (reading the
    rest of the last one from the parts), from `parts`, the parts that hold those values."""

    array: str
    index: int
    first_shard: int
    stop_shard: int
    parts: tuple[PartSpan, ...]


@dataclass(frozen=True)
class SegmentDone:
    """What an assembly task hands back: the SHA-256s of the hash blocks it hashed (from `first_block`),
    the shards it wrote, and for `offsets` the entries of `offsets_index` that fall in its shards."""

    array: str
    index: int
    first_block: int
    digests: tuple[bytes, ...]
    shards: int
    index_entries: np.ndarray | None = None


def _extent(layout: ShardLayout, first_shard: int, stop_shard: int) -> tuple[int, int, int]:
    """A segment's values: where its shards begin and end, and where the last block it hashes ends."""
    begin, end = first_shard * layout.shard, min(stop_shard * layout.shard, layout.size)
    return begin, end, min(layout.size, -(-end // HASH_BLOCK) * HASH_BLOCK)


def segments(name: str, layout: ShardLayout, spans: Sequence[PartSpan]) -> list[Segment]:
    """`name`'s segments, each with the parts its values come from (tokens and weights: by token;
    offsets: by document, entry `j` > 0 being where document `j - 1` ends)."""
    by_documents = name == OFFSETS
    starts = np.array([s.first_document if by_documents else s.first_token for s in spans], np.int64)
    found = []
    for index, first in enumerate(range(0, layout.num_shards, SEGMENT_SHARDS)):
        stop = min(first + SEGMENT_SHARDS, layout.num_shards)
        begin, _, end = _extent(layout, first, stop)
        if by_documents:  # entries [begin, end) are the ends of documents [begin - 1, end - 1)
            begin, end = max(begin - 1, 0), end - 1
        lo = max(0, int(np.searchsorted(starts, begin, side="right")) - 1)
        hi = int(np.searchsorted(starts, end, side="left"))
        chosen = tuple(s for s in spans[lo:hi] if (s.documents if by_documents else s.tokens))
        found.append(Segment(name, index, first, stop, chosen))
    return found


def assemble_segment(out: str, build_dir: str, segment: Segment, layout: ShardLayout) -> SegmentDone:
    """Write one segment's shards of an array (created beforehand) from the parts, each shard whole (one
    object), check their layout, and hash the blocks that begin in them (`layout.block_digest`)."""
    directory, parts = Directory(out), Directory(build_dir)
    array = open_array(directory, segment.array)
    begin, end, hashed_to = _extent(layout, segment.first_shard, segment.stop_shard)
    first_block = -(-begin // HASH_BLOCK)
    cuts = sorted(
        {begin, end, hashed_to}
        | set(range(begin - begin % layout.shard + layout.shard, end, layout.shard))
        | set(range(first_block * HASH_BLOCK, hashed_to, HASH_BLOCK))
    )
    loaded: dict[int, np.ndarray] = {}
    digests, entries, writes, shard_values = [], [], deque(), []
    block = hashlib.sha256() if begin % HASH_BLOCK == 0 else None  # a block begun before: another's
    for a, b in zip(cuts, cuts[1:], strict=False):
        values = _values(segment, a, b, parts, loaded, layout.dtype)
        if a < end:
            shard_values.append(values)
            if b % layout.shard == 0 or b == end:  # a whole shard: written as one object
                whole = np.concatenate(shard_values)
                if segment.array == OFFSETS:
                    first = b - len(whole)
                    entries.append(whole[-first % OFFSETS_CHUNK :: OFFSETS_CHUNK])
                writes.append(array[b - len(whole) : b].write(whole))
                shard_values = []
                while len(writes) > MAX_PENDING_WRITES:
                    writes.popleft().result()
        if a % HASH_BLOCK == 0:
            block = hashlib.sha256()
        if block is not None:
            block.update(memoryview(np.ascontiguousarray(values)).cast("B"))
            if b % HASH_BLOCK == 0 or b == layout.size:
                digests.append(block.digest())
                block = None
    while writes:
        writes.popleft().result()
    check_shards(directory, segment.array, layout, range(segment.first_shard, segment.stop_shard))
    index = np.concatenate(entries).astype(np.uint64) if entries else None
    shards = segment.stop_shard - segment.first_shard
    return SegmentDone(segment.array, segment.index, first_block, tuple(digests), shards, index)


def _values(
    segment: Segment,
    begin: int,
    end: int,
    parts: Directory,
    loaded: dict[int, np.ndarray],
    dtype: np.dtype,
) -> np.ndarray:
    """Elements `[begin, end)` of the segment's array, from the parts that hold them (each part read once
    per task, and let go of once the shards have moved past it)."""
    pieces = []
    if segment.array == OFFSETS:
        if begin == 0:
            pieces.append(np.zeros(1, np.uint64))
        first_document, last_document = max(begin, 1) - 1, end - 1  # documents whose ends these entries are
        for span in segment.parts:
            lo = max(first_document, span.first_document)
            hi = min(last_document, span.first_document + span.documents)
            if lo >= hi:
                continue
            ends = _part(parts, lengths_key(span.unit), span.unit, loaded, cumulative=span.first_token)
            pieces.append(ends[lo - span.first_document : hi - span.first_document])
    else:
        key = weights_key if segment.array == LOSS_WEIGHTS else tokens_key
        for span in segment.parts:
            lo, hi = max(begin, span.first_token), min(end, span.first_token + span.tokens)
            if lo >= hi:
                continue
            values = _part(parts, key(span.unit), span.unit, loaded)
            pieces.append(values[lo - span.first_token : hi - span.first_token])
    for span in segment.parts:
        if span.unit in loaded and not _reaches(span, segment, end):
            del loaded[span.unit]
    joined = np.concatenate(pieces) if pieces else np.zeros(0, dtype)
    return joined.astype(dtype.newbyteorder("<"), copy=False)


def _reaches(span: PartSpan, segment: Segment, end: int) -> bool:
    """Whether the part still holds values past `end` (so a later shard of the task needs it)."""
    if segment.array == OFFSETS:
        return span.first_document + span.documents > end - 1
    return span.first_token + span.tokens > end


def _part(
    parts: Directory, key: str, unit: int, loaded: dict[int, np.ndarray], cumulative: int | None = None
) -> np.ndarray:
    """A part's array (offsets: its documents' ends in the store, from `cumulative`), read once per task."""
    if unit not in loaded:
        values = load_array(parts, key)
        if cumulative is not None:
            values = np.uint64(cumulative) + np.cumsum(values, dtype=np.uint64)
        loaded[unit] = values
    return loaded[unit]
