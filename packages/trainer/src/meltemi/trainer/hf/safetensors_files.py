"""Safetensors files written one tensor at a time, sharded with an index past a size, to a local directory or
straight into a bucket.

The format is a little-endian u64 header length, a JSON header (each tensor's dtype, shape and byte range)
and the raw bytes. All shapes are known before any data is read, so the header is written first and each
tensor is then fetched, converted in pieces of at most ``PIECE_BYTES`` and written before the next one is
fetched: the host holds one tensor at a time. Shards follow Hugging Face's names
(``model-00001-of-00003.safetensors`` and ``model.safetensors.index.json``); one shard is plain
``model.safetensors``.

Into a local directory each shard is streamed to its file. A bucket cannot append to an object, so there
(any location without a local path) each shard is assembled in a buffer of its exact size and written as
one object through the storage seam: a shard costs its size in memory, and TensorStore copies an object as
it takes it (twice, briefly), so an export into a bucket holds at most one tensor plus three times the
largest shard (``max_shard_bytes``, or the one tensor larger than that, alone in its shard).

>>> import tempfile, numpy as np
>>> out = tempfile.mkdtemp()
>>> plan = [TensorPlan("a", (2, 3), "float32"), TensorPlan("b", (4,), "bfloat16")]
>>> write_safetensors(out, plan, lambda t: np.ones(t.shape), max_shard_bytes=16)
['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json']
>>> write_safetensors("memory://doc/weights", plan, lambda t: np.ones(t.shape))
['model.safetensors']
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from collections.abc import Callable, Iterator

import jax.numpy as jnp
import numpy as np

from meltemi.datastore.storage import Directory, Location

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MAX_SHARD_BYTES = 2**30  # 1 GiB: what a shard costs in memory on its way into a bucket (three times, briefly)
PIECE_BYTES = 16 * 2**20  # a tensor is cast and written this much at a time
_CODES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


@dataclasses.dataclass(frozen=True)
class TensorPlan:
    """A tensor to write: its name, shape and dtype (``float32``, ``bfloat16`` or ``float16``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * jnp.dtype(self.dtype).itemsize


def _shards(plan: list[TensorPlan], max_shard_bytes: int) -> list[list[TensorPlan]]:
    """Consecutive tensors grouped so each shard stays under ``max_shard_bytes`` (a larger tensor alone)."""
    shards: list[list[TensorPlan]] = [[]]
    size = 0
    for tensor in plan:
        if shards[-1] and size + tensor.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += tensor.nbytes
    return shards


def _header(tensors: list[TensorPlan]) -> bytes:
    """The length-prefixed JSON header of a file holding ``tensors`` back to back, padded to 8 bytes."""
    entries: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        span = [offset, offset + t.nbytes]
        entries[t.name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": span}
        offset += t.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _pieces(array: np.ndarray, dtype: np.dtype) -> Iterator[memoryview]:
    """``array``'s bytes in ``dtype``, in row-major order, at most ``PIECE_BYTES`` of it cast at a time (a
    piece already in ``dtype`` is not copied)."""
    flat = array.reshape(-1)
    step = max(1, PIECE_BYTES // max(flat.itemsize, dtype.itemsize))
    for start in range(0, flat.size, step):
        piece = np.ascontiguousarray(flat[start : start + step].astype(dtype, copy=False))
        yield piece.view(np.uint8).data


class _Buffer:
    """A shard assembled in memory, written into at a moving position: its size is known from the plan, so
    it is allocated once and never grown (growing would copy it)."""

    def __init__(self, size: int):
        self.data = bytearray(size)
        self._view = memoryview(self.data)
        self._at = 0

    def write(self, piece: bytes | memoryview) -> None:
        self._view[self._at : self._at + len(piece)] = piece
        self._at += len(piece)

    def flush(self) -> None:
        """Nothing to do: the shard is written whole once assembled (a file is flushed tensor by tensor)."""


def _write_shard(sink, tensors: list[TensorPlan], fetch: Callable[[TensorPlan], np.ndarray]) -> None:
    sink.write(_header(tensors))
    for t in tensors:
        data = np.asarray(fetch(t))
        if data.shape != t.shape:
            raise ValueError(f"{t.name}: fetched shape {data.shape}, planned {t.shape}")
        for piece in _pieces(data, jnp.dtype(t.dtype)):
            sink.write(piece)
        sink.flush()  # on disk before the next tensor is fetched
        del data  # and released


def write_safetensors(
    out: str | os.PathLike | Location | Directory,
    plan: list[TensorPlan],
    fetch: Callable[[TensorPlan], np.ndarray],
    *,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> list[str]:
    """Write ``plan``'s tensors, ``fetch``-ed one at a time in order, into ``out`` (a local directory, or a
    bucket URL); return the names written, the index last."""
    directory = out if isinstance(out, Directory) else Directory(out)
    local = directory.location.local_path
    shards = _shards(plan, max_shard_bytes)
    if len(shards) == 1:
        names = [SINGLE_FILE]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    for name, tensors in zip(names, shards, strict=True):
        if local is not None:
            local.mkdir(parents=True, exist_ok=True)
            with open(local / name, "wb") as f:
                _write_shard(f, tensors, fetch)
        else:
            buffer = _Buffer(len(_header(tensors)) + sum(t.nbytes for t in tensors))
            _write_shard(buffer, tensors, fetch)
            directory.write_bytes(name, buffer.data)
            del buffer
    if len(shards) > 1:
        weight_map = {t.name: name for name, tensors in zip(names, shards, strict=True) for t in tensors}
        index = {"metadata": {"total_size": sum(t.nbytes for t in plan)}, "weight_map": weight_map}
        directory.write_text(INDEX_FILE, json.dumps(index, indent=2) + "\n")
        names.append(INDEX_FILE)
    return names
