"""The on-disk token store format: sharded Zarr v3 arrays written through TensorStore, and a JSON manifest.

A store is a Zarr v3 group (a directory with `zarr.json`) holding three 1-D arrays and `manifest.json`:
`tokens` (uint16 or uint32), `offsets` (uint64 document boundaries, `num_docs + 1` entries from 0) and
`offsets_index` (every `chunk`-th entry of `offsets`, small enough to hold in memory, so that a reader
finds the document boundaries near any token by reading one chunk of `offsets`). A chat store (manifest
`format: chat`) holds a fourth, `loss_weights` (uint8, one per token, laid out as `tokens`: 1 on the
tokens a model learns to say, the assistant's, 0 elsewhere); its documents are conversations.

Each array is stored in shards (one file per `shard` elements, under `c/<n>`) of uncompressed inner chunks
of `chunk` elements, each followed by its CRC-32C (Zarr's `crc32c` codec), then the shard index (also
CRC-32C checked). The builder checks that every shard holds its chunks densely and in order, so a reader
finds chunk `j` of a shard at byte `j * (chunk * itemsize + 4)` and reads any run of chunks with one
ranged read; `zarr.open` and TensorStore read the same arrays through the standard codecs.

The manifest is written last, atomically, so its presence is what makes a store complete; a build in
progress keeps its state in `.build/`. Everything is written through the storage seam, so a store is the
same objects on a local disk and under a bucket prefix (`gs://`, `s3://`).
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorstore as ts
from google_crc32c import value as crc32c  # CRC-32C, the checksum Zarr's crc32c codec appends

from meltemi.datastore.storage import Directory, storage_context

FORMAT_VERSION = 3
READABLE_FORMATS = (2, 3)  # 2: each array's SHA-256 over all its values; 3: composed of its blocks'
MANIFEST = "manifest.json"
GROUP = "zarr.json"
BUILD_DIR = ".build"
STOPPED = "stopped.json"  # in BUILD_DIR: why a build stopped at a bad input, and how to go on
TOKENS = "tokens"
OFFSETS = "offsets"
OFFSETS_INDEX = "offsets_index"
LOSS_WEIGHTS = "loss_weights"
ARRAYS = (TOKENS, OFFSETS, OFFSETS_INDEX)
CHAT_ARRAYS = (*ARRAYS, LOSS_WEIGHTS)
TEXT, CHAT = "text", "chat"  # a manifest's `format`; stores written before chat ones have none (text)


def store_arrays(manifest: dict[str, Any]) -> tuple[str, ...]:
    """The arrays a store with this manifest holds.

    >>> store_arrays({"format": "chat"})[-1], store_arrays({})
    ('loss_weights', ('tokens', 'offsets', 'offsets_index'))
    """
    return CHAT_ARRAYS if manifest.get("format", TEXT) == CHAT else ARRAYS


DEFAULT_CHUNK_TOKENS = 1 << 10
DEFAULT_SHARD_TOKENS = 1 << 20
OFFSETS_CHUNK = 1 << 10
OFFSETS_SHARD = 1 << 17
CHECKSUM_BYTES = 4
MISSING = (1 << 64) - 1  # a shard index entry for a chunk that was never written


SEGMENT_SHARDS = 64  # shards one assembly task writes (format 3): its segment of the array
HASH_BLOCK = 1 << 24  # values per block of an array's composed SHA-256 (format 3), whatever its layout


def block_digest(values: np.ndarray) -> bytes:
    """The SHA-256 of one hash block's values, little-endian (`HASH_BLOCK` of them; the last block of an
    array holds what is left)."""
    stored = np.ascontiguousarray(values, values.dtype.newbyteorder("<"))
    return hashlib.sha256(memoryview(stored).cast("B")).digest()


def array_digest(block_digests: list[bytes]) -> str:
    """A format-3 array's SHA-256, hex: over the SHA-256s of its blocks of `HASH_BLOCK` values, in order.
    Blocks are fixed by the values alone, so the hash does not depend on the shard or chunk size, and tasks
    assembling the array in parallel each hash the blocks that begin in their share.

    >>> values = np.arange(10, dtype=np.uint16)
    >>> array_digest([block_digest(values)]) == array_sha256([values[:3], values[3:]], 3)
    True
    """
    return hashlib.sha256(b"".join(block_digests)).hexdigest()


def array_sha256(pieces: Iterable[np.ndarray], format_version: int, block: int = HASH_BLOCK) -> str:
    """An array's SHA-256 as a store of `format_version` records it, from its values in order (in pieces of
    any sizes, streamed): over all the values (format 2), or composed from its blocks' (format 3).

    >>> parts = [np.arange(4, dtype=np.uint16), np.arange(4, 6, dtype=np.uint16)]
    >>> array_sha256(parts, 2) == hashlib.sha256(np.arange(6, dtype="<u2").tobytes()).hexdigest()
    True
    >>> array_sha256(parts, 3, block=4) == array_digest([block_digest(parts[0]), block_digest(parts[1])])
    True
    """
    if format_version == 2:
        whole = hashlib.sha256()
        for values in pieces:
            whole.update(memoryview(np.ascontiguousarray(values, values.dtype.newbyteorder("<"))).cast("B"))
        return whole.hexdigest()
    digests, current, filled = [], hashlib.sha256(), 0
    for values in pieces:
        stored = np.ascontiguousarray(values, values.dtype.newbyteorder("<"))
        while stored.size:
            taken = stored[: block - filled]
            current.update(memoryview(taken).cast("B"))
            filled, stored = filled + taken.size, stored[taken.size :]
            if filled == block:
                digests.append(current.digest())
                current, filled = hashlib.sha256(), 0
    if filled:
        digests.append(current.digest())
    return array_digest(digests)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every token id fits in it, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def offsets_index_layout(documents: int) -> "ShardLayout":
    """The layout of `offsets_index` (format 3): every `OFFSETS_CHUNK`-th of a store's `documents + 1`
    offsets, in one shard, so a store opens reading one object for it (23 MB for 3 billion documents).

    >>> offsets_index_layout(5000).size, offsets_index_layout(5000).num_shards
    (5, 1)
    """
    size = -(-(documents + 1) // OFFSETS_CHUNK)
    return ShardLayout(
        size, np.dtype(np.uint64), OFFSETS_CHUNK, max(1, -(-size // OFFSETS_CHUNK)) * OFFSETS_CHUNK
    )


def default_shard_tokens(chunk_tokens: int) -> int:
    """The largest multiple of `chunk_tokens` up to `DEFAULT_SHARD_TOKENS` (at least one chunk)."""
    return chunk_tokens * max(1, DEFAULT_SHARD_TOKENS // chunk_tokens)


@dataclass(frozen=True)
class ShardLayout:
    """Where each element of a sharded 1-D array lives: shard file, chunk, and byte position.

    >>> layout = ShardLayout(size=2500, dtype=np.dtype(np.uint16), chunk=1000, shard=2000)
    >>> layout.num_chunks, layout.num_shards, layout.chunk_bytes, layout.chunks_in_shard(1)
    (3, 2, 2004, 1)
    """

    size: int
    dtype: np.dtype
    chunk: int
    shard: int

    def __post_init__(self):
        if self.chunk < 1 or self.shard < self.chunk or self.shard % self.chunk:
            raise ValueError(
                f"a shard ({self.shard}) must be a positive multiple of the chunk ({self.chunk})"
            )

    @property
    def chunk_bytes(self) -> int:
        """Bytes one chunk takes in a shard: its values, then their CRC-32C."""
        return self.chunk * self.dtype.itemsize + CHECKSUM_BYTES

    @property
    def chunks_per_shard(self) -> int:
        return self.shard // self.chunk

    @property
    def num_chunks(self) -> int:
        return -(-self.size // self.chunk)

    @property
    def num_shards(self) -> int:
        return -(-self.size // self.shard)

    def shard_key(self, shard: int) -> str:
        """The shard's file, relative to the array (Zarr v3's default chunk key encoding)."""
        return f"c/{shard}"

    def chunks_in_shard(self, shard: int) -> int:
        return min(self.chunks_per_shard, self.num_chunks - shard * self.chunks_per_shard)

    def index_bytes(self, shard: int) -> bytes:
        """The shard index the builder writes: every chunk present, densely, in order, then its CRC-32C."""
        present = self.chunks_in_shard(shard)
        entries = np.full((self.chunks_per_shard, 2), MISSING, "<u8")
        entries[:present, 0] = np.arange(present) * self.chunk_bytes
        entries[:present, 1] = self.chunk_bytes
        body = entries.tobytes()
        return body + crc32c(body).to_bytes(CHECKSUM_BYTES, "little")

    def shard_file_size(self, shard: int) -> int:
        return self.chunks_in_shard(shard) * self.chunk_bytes + 16 * self.chunks_per_shard + CHECKSUM_BYTES

    def metadata(self) -> dict[str, Any]:
        """The array's Zarr v3 metadata, as TensorStore is asked to create it."""
        little = {"name": "bytes", "configuration": {"endian": "little"}}
        sharding = {
            "chunk_shape": [self.chunk],
            "codecs": [little, {"name": "crc32c"}],
            "index_codecs": [little, {"name": "crc32c"}],
            "index_location": "end",
        }
        return {
            "shape": [self.size],
            "data_type": self.dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [self.shard]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
            "fill_value": 0,
        }

    def mismatch(self, zarr_json: dict[str, Any]) -> str | None:
        """How an array's `zarr.json` differs from this layout, in words (None when it matches)."""
        try:
            (codec,) = zarr_json["codecs"]
            inner = codec["configuration"]
            found = {
                "shape": zarr_json["shape"],
                "data_type": zarr_json["data_type"],
                "shard": zarr_json["chunk_grid"]["configuration"]["chunk_shape"],
                "codec": codec["name"],
                "chunk": inner["chunk_shape"],
                "chunk codecs": [c["name"] for c in inner["codecs"]],
                "endian": inner["codecs"][0].get("configuration", {}).get("endian"),
                "index": inner.get("index_location", "end"),
            }
        except (KeyError, TypeError, ValueError, IndexError) as e:
            return f"its metadata lacks a field ({e!r})"
        expected = {
            "shape": [self.size],
            "data_type": self.dtype.name,
            "shard": [self.shard],
            "codec": "sharding_indexed",
            "chunk": [self.chunk],
            "chunk codecs": ["bytes", "crc32c"],
            "endian": "little" if self.dtype.itemsize > 1 else found["endian"],  # one byte has no endianness
            "index": "end",
        }
        for key, value in expected.items():
            if found[key] != value:
                return f"its {key} is {found[key]}, the manifest says {value}"
        return None

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the array's layout."""
        return {"dtype": self.dtype.name, "size": self.size, "chunk": self.chunk, "shard": self.shard}

    @classmethod
    def from_manifest(cls, entry: dict[str, Any]) -> "ShardLayout":
        return cls(int(entry["size"]), np.dtype(entry["dtype"]), int(entry["chunk"]), int(entry["shard"]))


def create_array(root: Directory, array: str, layout: ShardLayout) -> ts.TensorStore:
    """Create (replacing any old one) a sharded array; chunks equal to the fill value are stored too."""
    spec = root.array_spec(array) | {
        "metadata": layout.metadata(),
        "create": True,
        "delete_existing": True,
        "store_data_equal_to_fill_value": True,
    }
    return ts.open(spec, context=storage_context()).result()


def group_metadata() -> dict[str, Any]:
    """The root `zarr.json` that makes the store a Zarr v3 group, so `zarr.open(store)` lists its arrays."""
    return {"zarr_format": 3, "node_type": "group", "attributes": {"meltemi_token_store": FORMAT_VERSION}}


def canonical_tokenizer_hash(tokenizer_json: str) -> str:
    """SHA-256 of the tokenizer's JSON with sorted keys and no whitespace, so formatting does not matter."""
    canonical = json.dumps(json.loads(tokenizer_json), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
