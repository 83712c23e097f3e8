"""The checkpoint on disk: ``step-N/``, one Zarr v3 array per leaf of the train state plus ``manifest.json``.

- Each array is named by its pytree path (``model.layers.stacked.mlp.up_proj.weight``,
  ``opt_state.1.0.mu.norm.weight``, and with ``optimizer.ema`` the average ``ema.norm.weight``), chunked by
  the shard one device holds, every chunk followed by its CRC-32C (Zarr's ``crc32c`` codec), so a flipped
  byte is caught on read by TensorStore and zarr-python alike.
  bfloat16 arrays are stored as float32 (lossless; zarr-python has no bfloat16) and cast back on restore.
- ``manifest.json``: format version, step, the resolved config, every array's name, dtype, shape, chunk shape,
  chunk count and fingerprint (``meltemi.trainer.checkpoint.digests``: the same on any mesh), the digest of
  the whole state, the data position (the step, and the hash of the global batch a resumption reads
  first), the run seed, the run's tokenizer (its copy in the run directory and that file's SHA-256), the
  end-of-text token (a chat run's: the end of a turn, and every id generation stops at), a chat run's
  recipe (``chat``: the datastore's ``ChatRecipe`` in a chat store's manifest form, its template what
  export and chat sampling render with, and the tokens the tokenizer gained),
  where the run was initialised from, and the versions of jax and meltemi.
  ``meltemi.trainer.checkpoint.verify`` recomputes the digests.
- A checkpoint is written straight into ``step-N/`` (a local directory or a bucket prefix, through the
  storage seam ``meltemi.datastore.storage``): every process writes its shards, the processes agree that all
  are written, then process 0 writes ``manifest.json`` and, last, ``COMMITTED`` (one atomic PUT). No rename,
  no fsync of ours, no polled marker files. A ``step-N`` without ``COMMITTED`` is invisible to a reader and
  removed by the next run; a reader only trusts a marked checkpoint whose arrays all read back with good
  checksums.
- No pickle: opening a checkpoint never runs code.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import tensorstore as ts

from meltemi.datastore.storage import Directory, Location, storage_context
from meltemi.trainer.data.run_tokenizer import EndOfText, TokenizerRecord

if TYPE_CHECKING:  # the template engine is imported by a checkpoint that records a chat recipe
    from meltemi.datastore.chat.recipe import ChatRecipe

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
COMMITTED = "COMMITTED"
STORED_AS_FLOAT32 = ("bfloat16", "float16")
MODEL_PREFIX = "model."  # the arrays of the weights as trained
EMA_PREFIX = "ema."  # the arrays of their moving average (optimizer.ema), named as the weights' are


def leaf_name(path: tuple) -> str:
    """A pytree path as a dotted array name: attribute names, dict keys and sequence indices.

    >>> leaf_name((jax.tree_util.GetAttrKey("model"), jax.tree_util.SequenceKey(1)))
    'model.1'
    """
    parts = []
    for key in path:
        for attr in ("name", "key", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts)


@dataclasses.dataclass(frozen=True)
class ArrayRecord:
    """What the manifest says of one array (``axes``: its logical axis names, for named arrays)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    axes: tuple[str, ...] | None = None
    fingerprint: str | None = None  # digests.fingerprints of its values; None in older checkpoints

    @property
    def stored_dtype(self) -> str:
        return "float32" if self.dtype in STORED_AS_FLOAT32 else self.dtype

    @property
    def chunk_count(self) -> int:
        return int(
            np.prod([-(-s // c) for s, c in zip(self.shape, self.chunk_shape, strict=True)], dtype=np.int64)
        )


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """Where the data stands: the step a resumption starts at, and the hash of that step's global batch
    (``distributed.global_batch_hash``; None when the data ends there)."""

    step: int
    next_batch: str | None


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A checkpoint's ``manifest.json``, typed. The fields after ``versions`` are absent (None) in
    checkpoints written before they were recorded. A chat run's ``chat`` is its recipe, recorded as a chat
    store records it, with ``added_tokens`` (the tokens its tokenizer gained) beside it in the same record;
    a record of earlier checkpoints (the template and its special tokens) reads with the recipe's
    defaults."""

    format_version: int
    step: int
    seed: int
    config: dict[str, Any]
    arrays: list[ArrayRecord]
    initialized_from: str | None
    versions: dict[str, str]
    state_digest: str | None = None
    data_position: DataPosition | None = None
    tokenizer: TokenizerRecord | None = None
    end_of_text: EndOfText | None = None
    chat: ChatRecipe | None = None
    added_tokens: tuple[str, ...] = ()

    @property
    def has_ema(self) -> bool:
        """Whether the checkpoint holds a moving average of the weights (``optimizer.ema``)."""
        return any(record.name.startswith(EMA_PREFIX) for record in self.arrays)

    def to_json(self) -> str:
        record = dataclasses.asdict(dataclasses.replace(self, chat=None))
        added = record.pop("added_tokens")
        if self.chat is not None:
            record["chat"] = self.chat.to_manifest() | {"added_tokens": added}
        return json.dumps(record, indent=1)

    @staticmethod
    def from_json(text: str, where: str = MANIFEST) -> Manifest:
        """The manifest in ``text``, read from ``where`` (which a chat template of an earlier checkpoint,
        recorded without its source, is named by)."""
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("format_version") != FORMAT_VERSION:
            version = raw.get("format_version") if isinstance(raw, dict) else None
            raise ValueError(f"checkpoint format {version}, this trainer reads {FORMAT_VERSION}")
        arrays = [
            ArrayRecord(
                a["name"],
                a["dtype"],
                tuple(a["shape"]),
                tuple(a["chunk_shape"]),
                None if a.get("axes") is None else tuple(a["axes"]),
                a.get("fingerprint"),
            )
            for a in raw["arrays"]
        ]
        position, tokenizer, eot = raw.get("data_position"), raw.get("tokenizer"), raw.get("end_of_text")
        return Manifest(
            format_version=raw["format_version"],
            step=int(raw["step"]),
            seed=int(raw["seed"]),
            config=raw["config"],
            arrays=arrays,
            initialized_from=raw.get("initialized_from"),
            versions=raw.get("versions", {}),
            state_digest=raw.get("state_digest"),
            data_position=None
            if position is None
            else DataPosition(int(position["step"]), position["next_batch"]),
            tokenizer=None if tokenizer is None else TokenizerRecord(tokenizer["file"], tokenizer["sha256"]),
            end_of_text=None
            if eot is None
            else EndOfText(eot["token"], eot["id"], tuple(eot.get("others", ()))),
            chat=_recipe(raw.get("chat"), where),
            added_tokens=tuple((raw.get("chat") or {}).get("added_tokens", ())),
        )


def _recipe(record: dict[str, Any] | None, where: str) -> ChatRecipe | None:
    """A manifest's ``chat`` record as the recipe it holds (None without one); a ``ValueError`` when it
    cannot be read, as for the rest of the manifest."""
    if record is None:
        return None
    from meltemi.datastore.chat.recipe import ChatRecipe
    from meltemi.datastore.errors import ChatTemplateError

    try:
        return ChatRecipe.from_manifest(record, where)
    except ChatTemplateError as e:
        raise ValueError(str(e)) from None


def as_directory(where: str | os.PathLike | Location | Directory) -> Directory:
    """A user's path or URL (or a `Location`, or a `Directory`) as the storage seam's `Directory`."""
    return where if isinstance(where, Directory) else Directory(where)


def array_spec(step: Directory, record: ArrayRecord, create: bool) -> dict[str, Any]:
    """The TensorStore spec of one checkpoint array (Zarr v3, CRC-32C after every chunk)."""
    spec = step.array_spec(record.name)
    if create:
        spec["metadata"] = {
            "shape": list(record.shape),
            "data_type": record.stored_dtype,
            "chunk_grid": {
                "name": "regular",
                "configuration": {"chunk_shape": list(record.chunk_shape) or []},
            },
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "attributes": {"dtype": record.dtype},
        }
        spec["create"] = True
        spec["open"] = True  # every process of a run creates the same array, then writes its own shards
        spec["store_data_equal_to_fill_value"] = True  # every chunk stored: a missing one is damage
    return spec


def write_group_marker(step: Directory) -> None:
    """A Zarr v3 group at the checkpoint's root, so ``zarr.open_group(step_dir)`` lists its arrays."""
    step.write_text("zarr.json", json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))


def zarr_metadata(spec: dict[str, Any]) -> bytes:
    """The ``zarr.json`` TensorStore writes when it creates the array of ``spec`` (made in memory).

    >>> record = ArrayRecord("w", "float32", (2, 3), (2, 3), None)
    >>> json.loads(zarr_metadata(array_spec(Directory("memory://doc/step"), record, create=True)))["shape"]
    [2, 3]
    """
    return _created_metadata(json.dumps({k: v for k, v in spec.items() if k != "kvstore"}, sort_keys=True))


@functools.cache  # every save writes the same arrays: each one's metadata is made once per process
def _created_metadata(spec_json: str) -> bytes:
    context = ts.Context()
    ts.open({**json.loads(spec_json), "kvstore": {"driver": "memory"}}, context=context).result()
    stored = ts.KvStore.open({"driver": "memory"}, context=context).result().read("zarr.json").result()
    return bytes(stored.value)


def write_shards(
    step: Directory, record: ArrayRecord, shards: Iterable[tuple[tuple[slice, ...], np.ndarray]]
) -> list[ts.WriteFutures]:
    """Create the array and write each ``(index, host data)`` shard; returns TensorStore write futures.
    The shards must not change afterwards: TensorStore may read them until the futures are done.

    The array's ``zarr.json`` is written whole, as TensorStore would write it, and the shards are written
    to the metadata assumed: creating the array through TensorStore reads the metadata and checks for it
    (a GET and a HEAD in a bucket) before writing it, four requests per array instead of two.
    """
    spec = array_spec(step, record, create=True)
    step.write_bytes(f"{record.name}/zarr.json", zarr_metadata(spec))
    del spec["create"]
    store = ts.open({**spec, "assume_metadata": True}, context=storage_context()).result()
    # TensorStore keeps a reference to each shard instead of copying it (a third of the writer's CPU time):
    # the caller hands over host copies it no longer changes.
    return [
        store[index].write(
            data.astype(record.stored_dtype, copy=False), can_reference_source_data_indefinitely=True
        )
        for index, data in shards
    ]


def open_array(step: Directory, record: ArrayRecord) -> ts.Future:
    """Start opening a stored array for reading (a TensorStore future of the open store)."""
    return ts.open(array_spec(step, record, create=False), open=True, context=storage_context())


def checked_store(step: Directory, record: ArrayRecord, store: ts.TensorStore) -> ts.TensorStore:
    """``store``, once its shape is the one the manifest records (else a ``ValueError`` naming the array)."""
    if tuple(store.shape) != record.shape:
        raise ValueError(
            f"{step.where(record.name)}: shape {tuple(store.shape)}, the manifest says {record.shape}"
        )
    return store


def read_array(
    step: str | os.PathLike | Location | Directory,
    record: ArrayRecord,
    index: tuple[slice, ...] | None = None,
) -> np.ndarray:
    """Read ``index`` of an array (all of it by default), checksums verified, in its original dtype."""
    step = as_directory(step)
    store = checked_store(step, record, open_array(step, record).result())
    data = (store[index] if index is not None else store).read().result()
    return np.asarray(data).astype(jax.numpy.dtype(record.dtype), copy=False)


def missing_chunks(keys: Iterable[str], record: ArrayRecord) -> int:
    """How many of the array's chunk objects are absent from ``keys`` (a listing of its checkpoint; Zarr
    would read a missing chunk as zeros, silently)."""
    chunk_root = f"{record.name}/c"
    present = sum(1 for key in keys if key == chunk_root or key.startswith(chunk_root + "/"))
    return max(record.chunk_count - present, 0)
