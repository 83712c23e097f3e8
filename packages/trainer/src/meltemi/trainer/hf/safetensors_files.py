"""Safetensors files written one tensor at a time, sharded with an index past a size, and read lazily.

The format is a little-endian u64 header length, a JSON header (each tensor's dtype, shape and byte range)
and the raw bytes. All shapes are known before any data is read, so the header is written first and each
tensor is then fetched, converted and appended on its own: the host never holds more than one tensor.
Shards follow Hugging Face's names (``model-00001-of-00003.safetensors`` and
``model.safetensors.index.json``); one shard is plain ``model.safetensors``.

>>> import tempfile, numpy as np
>>> out = Path(tempfile.mkdtemp())
>>> plan = [TensorPlan("a", (2, 3), "float32"), TensorPlan("b", (4,), "bfloat16")]
>>> files = write_safetensors(out, plan, lambda t: np.ones(t.shape), max_shard_bytes=16)
>>> [f.name for f in files]
['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
>>> reader = SafetensorsReader(out)
>>> reader.shapes["b"], float(reader["b"].sum())
((4,), 4.0)
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from safetensors import safe_open

from meltemi.trainer.hf.config_map import HfFormatError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
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
    entries: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        span = [offset, offset + t.nbytes]
        entries[t.name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape), "data_offsets": span}
        offset += t.nbytes
    text = json.dumps(entries, separators=(",", ":")).encode()
    return text + b" " * (-len(text) % 8)


def write_safetensors(
    out_dir: Path,
    plan: list[TensorPlan],
    fetch: Callable[[TensorPlan], np.ndarray],
    *,
    max_shard_bytes: int = 5 * 2**30,
) -> list[Path]:
    """Write ``plan``'s tensors, ``fetch``-ed one at a time in order, into ``out_dir``; return the files."""
    shards = _shards(plan, max_shard_bytes)
    if len(shards) == 1:
        names = [SINGLE_FILE]
    else:
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    paths = []
    for name, tensors in zip(names, shards, strict=True):
        path = out_dir / name
        header = _header(tensors)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header)
            for t in tensors:
                data = np.ascontiguousarray(np.asarray(fetch(t)).astype(jnp.dtype(t.dtype)))
                if data.shape != t.shape:
                    raise ValueError(f"{t.name}: fetched shape {data.shape}, planned {t.shape}")
                f.write(data.reshape(-1).view(np.uint8).data)
                f.flush()  # on disk before the next tensor is fetched
        paths.append(path)
    if len(shards) > 1:
        weight_map = {t.name: name for name, tensors in zip(names, shards, strict=True) for t in tensors}
        index = {"metadata": {"total_size": sum(t.nbytes for t in plan)}, "weight_map": weight_map}
        (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return paths


class SafetensorsReader(Mapping[str, np.ndarray]):
    """A Hugging Face directory's tensors by name, each read from disk only when asked for.

    ``shapes`` (from the headers alone) lets a caller check every shape before reading any data.
    """

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        index, single = directory / INDEX_FILE, directory / SINGLE_FILE
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (ValueError, KeyError) as error:
                raise HfFormatError(f"{index}: not a safetensors index ({error})") from None
            self._files = {name: directory / file for name, file in weight_map.items()}
        elif single.exists():
            self._files = {}
            with self._open(single) as f:
                self._files = dict.fromkeys(f.keys(), single)
        else:
            raise HfFormatError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE} is there")
        self.shapes: dict[str, tuple[int, ...]] = {}
        for path in sorted(set(self._files.values())):
            if not path.exists():
                raise HfFormatError(f"{path}: listed in {INDEX_FILE} but missing")
            with self._open(path) as f:
                for name in f.keys():
                    self.shapes[name] = tuple(f.get_slice(name).get_shape())

    @staticmethod
    def _open(path: Path):
        try:
            return safe_open(str(path), framework="numpy")
        except Exception as error:  # safetensors raises its own SafetensorError (or OSError)
            raise HfFormatError(f"{path}: not a readable safetensors file ({error})") from None

    def __getitem__(self, name: str) -> np.ndarray:
        path = self._files[name]
        with self._open(path) as f:
            return f.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)
