"""Reading a checkpoint onto any mesh: each process reads only what its devices hold, every array opened and
every shard requested before any is awaited, so a bucket's objects are fetched concurrently."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import jax
import numpy as np

import haliax_lite as hax
from meltemi.trainer.checkpoint.format import Manifest, as_directory, checked_store, leaf_name, open_array
from meltemi.trainer.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import os

    from meltemi.datastore.storage import Directory, Location

_Tree = TypeVar("_Tree")


def _raw(leaf):
    return leaf.array if isinstance(leaf, hax.NamedArray) else leaf


def _key(index: tuple[slice, ...]) -> tuple:
    return tuple((s.start, s.stop, s.step) for s in index)


def restore(
    step: str | os.PathLike | Location | Directory,
    manifest: Manifest,
    abstract_state: _Tree,
    shardings: _Tree,
    *,
    prefix: str = "",
) -> _Tree:
    """Read a checkpoint onto ``shardings`` (any mesh): each device's shard read from its chunks, CRC-checked.

    Every array is opened, and every shard this process needs requested, before any is awaited, so a
    bucket's objects are fetched concurrently. ``abstract_state`` gives the tree to rebuild (a subtree, such
    as the model, with ``prefix="model."``). An array it needs that the checkpoint lacks, or has in another
    shape, is a ``ConfigError`` naming it; a chunk that fails its checksum or is cut short is a
    ``CheckpointError``.
    """
    step = as_directory(step)
    records = {r.name: r for r in manifest.arrays}
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_state, is_leaf=hax.is_named_array)
    sharding_leaves = jax.tree_util.tree_flatten(shardings, is_leaf=hax.is_named_array)[0]
    wanted = []
    for (key_path, leaf), sharding in zip(leaves, sharding_leaves, strict=True):
        name, want = prefix + leaf_name(key_path), _raw(leaf)
        record = records.get(name)
        if record is None:
            raise ConfigError(f"{step.where()}: has no array {name}, which the config's train state needs")
        if record.shape != tuple(want.shape):
            raise ConfigError(
                f"{step.where()}: array {name} has shape {record.shape}, the config's train state needs "
                f"{tuple(want.shape)}"
            )
        wanted.append((leaf, record, _raw(sharding), want.dtype, open_array(step, record)))

    def unreadable(name: str, error: Exception) -> CheckpointError:
        return CheckpointError(
            f"{step.where()}: array {name} does not read back: {' '.join(str(error).split())}"
        )

    reads = []
    for leaf, record, target, dtype, opening in wanted:
        try:
            store = checked_store(step, record, opening.result())
        except Exception as e:  # TensorStore reports a missing or damaged array
            raise unreadable(record.name, e) from None
        devices = target.addressable_devices_indices_map(record.shape)
        pending = {}
        for index in devices.values():
            pending.setdefault(_key(index), store[index].read())
        reads.append((leaf, record, target, dtype, devices, pending))
    restored = []
    for leaf, record, target, dtype, devices, pending in reads:
        try:
            values = {key: future.result() for key, future in pending.items()}
        except Exception as e:  # TensorStore reports a bad checksum or a truncated chunk
            raise unreadable(record.name, e) from None
        stored = jax.numpy.dtype(record.dtype)
        parts = [
            jax.device_put(
                np.asarray(values[_key(index)]).astype(stored, copy=False).astype(dtype, copy=False), device
            )
            for device, index in devices.items()
        ]
        array = jax.make_array_from_single_device_arrays(record.shape, target, parts)
        restored.append(hax.NamedArray(array, leaf.axes) if isinstance(leaf, hax.NamedArray) else array)
    return jax.tree_util.tree_unflatten(treedef, restored)
