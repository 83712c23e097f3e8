"""A safetensors directory's tensors by name, read where they lie (a local directory or a bucket) without
copying its files: each file's header with two ranged reads and its end checked with one more, each
tensor with one ranged read when asked for.

``regions(name)`` reads a tensor region by region instead (``TensorRegions``): a region costs one ranged
read of the bytes from its first element to its last, so placing a tensor on a mesh
(``haliax_lite.host_placement``) reads, in each process, only the part its devices cover.

A header is checked whole before any tensor is read: its dtypes and shapes, each tensor's byte range the
size its shape needs, the ranges back to back, and the file long enough to hold them. What is wrong is an
``HfFormatError`` naming the file and the tensor.

>>> import numpy as np
>>> from meltemi.trainer.hf.safetensors_files import TensorPlan, write_safetensors
>>> plan = [TensorPlan("a", (2, 3), "float32"), TensorPlan("b", (4,), "bfloat16")]
>>> _ = write_safetensors("memory://doc/read", plan, lambda t: np.ones(t.shape), max_shard_bytes=16)
>>> reader = SafetensorsReader("memory://doc/read")
>>> reader.shapes, float(reader["b"].sum())
({'a': (2, 3), 'b': (4,)}, 4.0)
>>> reader.regions("a")[1:, :2].tolist()
[[1.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from haliax_lite.host_placement import region_bounds
from meltemi.datastore.errors import OutOfRangeError
from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.hf.config_map import HfFormatError
from meltemi.trainer.hf.safetensors_files import INDEX_FILE, SINGLE_FILE

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(jnp.bfloat16),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """Where a tensor's bytes lie: its file and byte range there, with its dtype and shape."""

    file: str
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    stop: int


class SafetensorsReader(Mapping[str, np.ndarray]):
    """A Hugging Face directory's tensors by name (a path or a bucket URL), each read only when asked for.

    ``shapes`` (from the headers alone) lets a caller check every shape before reading any data. A tensor
    comes back as a read-only array over the bytes read.
    """

    def __init__(self, directory: str | os.PathLike | Location | Directory):
        self._dir = directory if isinstance(directory, Directory) else Directory(directory)
        index = self._dir.read_bytes(INDEX_FILE)
        if index is None:
            tensors = self._header(SINGLE_FILE, listed=False)
        else:
            tensors = {}
            placed = self._weight_map(index)
            headers = {file: self._header(file, listed=True) for file in sorted(set(placed.values()))}
            for name, file in placed.items():
                if name not in headers[file]:
                    raise HfFormatError(
                        f"{self._dir.where(file)}: {INDEX_FILE} places {name} here, but it lacks it"
                    )
                tensors[name] = headers[file][name]
        self._tensors = tensors
        self.shapes: dict[str, tuple[int, ...]] = {name: t.shape for name, t in tensors.items()}

    def _weight_map(self, index: bytes) -> dict[str, str]:
        where = self._dir.where(INDEX_FILE)
        try:
            placed = json.loads(index)["weight_map"]
        except (ValueError, KeyError, TypeError) as error:
            raise HfFormatError(f"{where}: not a safetensors index ({error!r})") from None
        if not isinstance(placed, dict):
            raise HfFormatError(f"{where}: not a safetensors index (weight_map is not an object)")
        for name, file in placed.items():
            if not isinstance(file, str) or not file or file.startswith("/") or ".." in file.split("/"):
                raise HfFormatError(
                    f"{where}: {name} is placed in {file!r}, which names no file of the directory"
                )
        return placed

    def _read(self, file: str, start: int, stop: int, what: str) -> bytes | None:
        try:
            return self._dir.read_range(file, start, stop)
        except OutOfRangeError:
            raise _unreadable(
                self._dir.where(file), f"it ends before byte {stop}, where {what} ends"
            ) from None

    def _header(self, file: str, *, listed: bool) -> dict[str, _Tensor]:
        """The tensors of ``file`` from its header, checked (``listed``: named by the index)."""
        where = self._dir.where(file)
        head = self._read(file, 0, 8, "the header's length")
        if head is None:
            if listed:
                raise HfFormatError(f"{where}: listed in {INDEX_FILE} but missing")
            raise HfFormatError(f"{self._dir.where()}: neither {SINGLE_FILE} nor {INDEX_FILE} is there")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise _unreadable(where, f"a header of {length:,} bytes")
        try:
            fields = json.loads(self._read(file, 8, 8 + length, "the header") or b"")
        except ValueError as error:
            raise _unreadable(where, f"its header is not JSON: {error}") from None
        if not isinstance(fields, dict):
            raise _unreadable(where, "its header is not a JSON object")
        tensors = {
            name: _tensor(where, file, name, entry, 8 + length)
            for name, entry in fields.items()
            if name != "__metadata__"
        }
        end = 8 + length
        for name, tensor in sorted(tensors.items(), key=lambda item: item[1].start):
            if tensor.start != end:
                raise _unreadable(where, f"{name}'s bytes do not follow the previous tensor's")
            end = tensor.stop
        if end > 8 + length:
            self._read(file, end - 1, end, "its last tensor")
        return tensors

    def __getitem__(self, name: str) -> np.ndarray:
        return np.asarray(self.regions(name))

    def regions(self, name: str) -> TensorRegions:
        """The tensor ``name``, read region by region when indexed (``np.asarray`` reads it whole)."""
        tensor = self._tensors[name]

        def read(start: int, stop: int) -> bytes:
            data = self._read(tensor.file, tensor.start + start, tensor.start + stop, f"the tensor {name}")
            if data is None:
                raise HfFormatError(f"{self._dir.where(tensor.file)}: vanished while it was read")
            return data

        return TensorRegions(read, tensor.dtype, tensor.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


class TensorRegions:
    """A stored row-major tensor read region by region (``haliax_lite.host_placement.HostRegions``): a
    region (a tuple of slices of step 1) is one read of the bytes from its first element to its last,
    cast to ``dtype``. ``reshape`` and ``astype`` give views of the same bytes without reading.

    >>> data = np.arange(12, dtype="<f4")
    >>> tensor = TensorRegions(lambda a, b: data.tobytes()[a:b], data.dtype, (3, 4))
    >>> tensor[1:3, 1:2].tolist(), tensor.reshape((2, 6)).astype(np.int32)[1:, 4:].tolist()
    ([[5.0], [9.0]], [[10, 11]])
    """

    def __init__(
        self,
        read: Callable[[int, int], bytes],
        stored: np.dtype,
        shape: tuple[int, ...],
        dtype: np.dtype | None = None,
    ):
        self._read, self._stored = read, np.dtype(stored)
        self.shape = tuple(shape)
        self.dtype = self._stored if dtype is None else np.dtype(dtype)

    def reshape(self, shape: tuple[int, ...]) -> TensorRegions:
        if math.prod(shape) != math.prod(self.shape):
            raise ValueError(f"cannot reshape a tensor of shape {self.shape} to {tuple(shape)}")
        return TensorRegions(self._read, self._stored, tuple(shape), self.dtype)

    def astype(self, dtype: Any) -> TensorRegions:
        return TensorRegions(self._read, self._stored, self.shape, np.dtype(dtype))

    def __getitem__(self, index: Any) -> np.ndarray:
        bounds = region_bounds(index, self.shape)
        region = tuple(stop - start for start, stop in bounds)
        if 0 in region:
            return np.empty(region, self.dtype)
        steps = [math.prod(self.shape[d + 1 :]) for d in range(len(self.shape))]
        first = sum(start * step for (start, _), step in zip(bounds, steps, strict=True))
        last = sum((stop - 1) * step for (_, stop), step in zip(bounds, steps, strict=True))
        size = self._stored.itemsize
        span = np.frombuffer(self._read(first * size, (last + 1) * size), self._stored)
        strides = tuple(step * size for step in steps)
        view = np.lib.stride_tricks.as_strided(span, region, strides, writeable=False)
        return view.astype(self.dtype, copy=False)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[tuple(slice(None) for _ in self.shape)]
        return whole if dtype is None else whole.astype(dtype, copy=False)


def _unreadable(where: str, why: str) -> HfFormatError:
    return HfFormatError(f"{where}: not a readable safetensors file ({why})")


def _tensor(where: str, file: str, name: str, entry: object, data_start: int) -> _Tensor:
    """One header entry, checked: a known dtype, a shape of sizes, and a byte range of the size they need."""
    if not isinstance(entry, dict):
        raise _unreadable(where, f"{name}: not a tensor's entry")
    code, shape, span = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if code not in DTYPES:
        raise _unreadable(where, f"{name}: dtype {code!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise _unreadable(where, f"{name}: shape {shape!r} is not a list of sizes")
    if not (isinstance(span, list) and len(span) == 2 and all(type(n) is int for n in span)):
        raise _unreadable(where, f"{name}: data_offsets {span!r} is not [start, end]")
    needed = math.prod(shape) * DTYPES[code].itemsize
    if not 0 <= span[0] <= span[1] or span[1] - span[0] != needed:
        raise _unreadable(
            where, f"{name}: bytes {span[0]}..{span[1]} for shape {tuple(shape)} in {code} ({needed})"
        )
    return _Tensor(file, DTYPES[code], tuple(shape), data_start + span[0], data_start + span[1])
