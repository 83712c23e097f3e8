"""The on-disk token store format: Zarr v3 arrays written through TensorStore, and a JSON manifest.

A store is a Zarr v3 group (a directory with `zarr.json`) holding `tokens/` (1-D, uint16 or uint32),
`offsets/` (uint64 document boundaries, `num_docs + 1` entries from 0) and `manifest.json`. The manifest
is written last, atomically, so its presence is what makes a store complete; a build in progress keeps its
state in `.build/`.
"""

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import tensorstore as ts

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GROUP = "zarr.json"
BUILD_DIR = ".build"
TOKENS = "tokens"
OFFSETS = "offsets"
DEFAULT_CHUNK_TOKENS = 1 << 14
OFFSETS_CHUNK = 1 << 16


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits in it, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def crc32_per_chunk(values: np.ndarray, chunk: int) -> np.ndarray:
    """CRC-32 of the little-endian bytes of each `chunk`-long piece of a 1-D array (the last may be short)."""
    data = memoryview(np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))).cast("B")
    step = chunk * values.dtype.itemsize
    return np.fromiter((zlib.crc32(data[a : a + step]) for a in range(0, len(data), step)), np.uint32)


def chunk_checksums(values: np.ndarray, chunk: int) -> list[str]:
    """The manifest's checksums of every chunk of a 1-D array, as 8 hex digits each."""
    return [f"{crc:08x}" for crc in crc32_per_chunk(values, chunk).tolist()]


def chunk_file(root: str | os.PathLike, array: str, chunk_index: int) -> str:
    """The file that holds one chunk, under Zarr v3's default chunk key encoding."""
    return os.path.join(os.fspath(root), array, "c", str(chunk_index))


def array_spec(root: str | os.PathLike, array: str) -> dict[str, Any]:
    """The TensorStore spec of one of the store's arrays."""
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(os.fspath(root), array)}}


def create_array(
    root: str | os.PathLike, array: str, size: int, dtype: np.dtype, chunk: int
) -> ts.TensorStore:
    """Create (replacing any old one) an uncompressed 1-D Zarr v3 array: chunk reads are plain copies."""
    metadata = {
        "shape": [size],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk]}},
        "chunk_key_encoding": {"name": "default"},
        "data_type": np.dtype(dtype).name,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "fill_value": 0,
    }
    spec = array_spec(root, array) | {"metadata": metadata, "create": True, "delete_existing": True}
    return ts.open(spec).result()


def open_array(root: str | os.PathLike, array: str) -> ts.TensorStore:
    """Open one of the store's arrays for reading, without a chunk cache (reads always hit storage)."""
    return ts.open(array_spec(root, array) | {"open": True}, read=True).result()


def group_metadata() -> dict[str, Any]:
    """The root `zarr.json` that makes the store a Zarr v3 group, so `zarr.open(store)` lists its arrays."""
    return {"zarr_format": 3, "node_type": "group", "attributes": {"meltemi_token_store": FORMAT_VERSION}}


def write_json_atomically(path: str | os.PathLike, payload: dict[str, Any]) -> None:
    """Write JSON aside, flush it to disk, then rename it into place: readers see all of it or none."""
    path = Path(path)
    aside = path.with_name(f".{path.name}.partial")
    with open(aside, "w") as f:
        json.dump(payload, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(aside, path)


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def canonical_tokenizer_hash(tokenizer_json: str) -> str:
    """SHA-256 of the tokenizer's JSON with sorted keys and no whitespace, so formatting does not matter."""
    canonical = json.dumps(json.loads(tokenizer_json), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
