"""Saving and restoring the train state: asynchronous, atomic, checked, kept by policy.

``save`` copies this process's shards of every array to host memory (the step loop waits only for that
copy, since the next step reuses the device buffers) and a background thread writes them; at most one
write is in flight. ``latest_good`` finds the newest checkpoint that is complete and reads back, skipping
damaged ones with a one-line warning; ``restore`` reads onto any mesh, each process only what its devices
hold.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

import haliax_lite as hax
from meltemi.trainer.checkpoint_format import (
    COMMITTED,
    FORMAT_VERSION,
    MANIFEST,
    ArrayRecord,
    DataPosition,
    Manifest,
    fsync_directory,
    fsync_tree,
    leaf_name,
    missing_chunks,
    read_array,
    write_group_marker,
    write_shards,
)
from meltemi.trainer.config import TrainerConfig
from meltemi.trainer.digests import combine, shard_sums, state_digest
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.run_tokenizer import EndOfText, TokenizerRecord

STEP_PREFIX = "step-"


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every ``step-N`` directory under ``root``, newest first."""
    found = []
    for path in root.glob(f"{STEP_PREFIX}*") if root.is_dir() else ():
        suffix = path.name.removeprefix(STEP_PREFIX)
        if suffix.isdigit() and path.is_dir():
            found.append((int(suffix), path))
    return sorted(found, reverse=True)


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Which checkpoints stay: every ``keep_every`` steps permanently, and the newest one.

    >>> RetentionPolicy(keep_every=100).keeps([50, 100, 150, 200, 250])
    [100, 200, 250]
    """

    keep_every: int | None

    def keeps(self, steps: list[int]) -> list[int]:
        newest = max(steps, default=None)
        return sorted(s for s in steps if s == newest or (self.keep_every and s % self.keep_every == 0))


@dataclasses.dataclass(frozen=True)
class SaveSchedule:
    """When to save: every ``every_steps`` steps, and when ``every_minutes`` have passed since the last save.

    >>> SaveSchedule(every_steps=10, every_minutes=None).due(step=20, minutes_since_save=0.0)
    True
    """

    every_steps: int | None
    every_minutes: float | None

    def due(self, step: int, minutes_since_save: float) -> bool:
        by_steps = bool(self.every_steps) and step % self.every_steps == 0
        by_time = self.every_minutes is not None and minutes_since_save >= self.every_minutes
        return by_steps or by_time


def _named_leaves(tree) -> list[tuple[str, Any]]:
    """``(name, leaf)`` for every leaf; named arrays kept whole (named by their field, not ``.array``)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=hax.is_named_array)[0]
    return [(leaf_name(path), leaf) for path, leaf in leaves]


def _raw(leaf):
    return leaf.array if isinstance(leaf, hax.NamedArray) else leaf


@dataclasses.dataclass
class _HostCopy:
    """This process's shards of every array, copied off the devices, and what the manifest will say."""

    step: int
    records: list[ArrayRecord]
    shards: list[list[tuple[tuple[slice, ...], np.ndarray]]]
    next_batch: str | None

    def fingerprint_sums(self) -> dict[str, list[int]]:
        """Per array, the fingerprint sums of this process's shards (``digests.shard_sums``, added up)."""
        sums = {}
        for record, shards in zip(self.records, self.shards, strict=True):
            parts = [shard_sums(data, index, record.shape) for index, data in shards]
            total = combine(parts)
            sums[record.name] = [int(total[:8], 16), int(total[8:], 16)]
        return sums


def _host_copy(state, next_batch: str | None) -> _HostCopy:
    records, shards = [], []
    for name, leaf in _named_leaves(state):
        array = _raw(leaf)
        axes = tuple(a.name for a in leaf.axes) if isinstance(leaf, hax.NamedArray) else None
        chunk = tuple(array.sharding.shard_shape(array.shape))
        records.append(ArrayRecord(name, str(array.dtype), tuple(array.shape), chunk, axes))
        # A copy, not a view: the next step donates (reuses) these device buffers.
        shards.append(
            [(s.index, np.array(s.data, copy=True)) for s in array.addressable_shards if s.replica_id == 0]
        )
    return _HostCopy(int(jax.device_get(state.step)), records, shards, next_batch)


class Checkpointer:
    """The checkpoints of one run directory (``<run dir>/checkpoints/step-N``)."""

    def __init__(
        self,
        run_dir: Path,
        trainer: TrainerConfig,
        config_json: dict[str, Any],
        *,
        initialized_from: str | None = None,
        tokenizer: TokenizerRecord | None = None,
        end_of_text: EndOfText | None = None,
        process_index: int = 0,
        process_count: int = 1,
        token: str = "local",
        commit_timeout_s: float = 1800.0,
    ):
        self.root = Path(run_dir) / "checkpoints"
        self.process_index, self.process_count, self.token = process_index, process_count, token
        self.is_primary = process_index == 0
        self.commit_timeout_s = commit_timeout_s
        self.schedule = SaveSchedule(trainer.checkpoint_every, trainer.checkpoint_every_minutes)
        self.retention = RetentionPolicy(trainer.keep_every)
        self.seed, self.config_json = trainer.seed, config_json
        self.initialized_from = initialized_from
        self.tokenizer, self.end_of_text = tokenizer, end_of_text
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_save = time.monotonic()
        self.seconds_blocked = 0.0

    def due(self, step: int) -> bool:
        return self.schedule.due(step, (time.monotonic() - self.last_save) / 60)

    def save(self, state, *, wait: bool = False, next_batch: str | None = None) -> Path:
        """Checkpoint ``state``: copy to host now, write in the background (``wait``: before returning).
        ``next_batch`` is the hash of the global batch of the state's step (the data position), if any."""
        started = time.perf_counter()
        self.wait()
        copy = _host_copy(state, next_batch)
        self.seconds_blocked += time.perf_counter() - started
        self.last_save = time.monotonic()
        self._writer = threading.Thread(
            target=self._write, args=(copy,), name="meltemi-checkpoint", daemon=True
        )
        self._writer.start()
        if wait:
            self.wait()
        return self.root / f"{STEP_PREFIX}{copy.step}"

    def wait(self) -> None:
        """Block until the write in flight (if any) is committed; re-raise its failure."""
        if self._writer is not None:
            started = time.perf_counter()
            self._writer.join()
            self.seconds_blocked += time.perf_counter() - started
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"writing a checkpoint under {self.root} failed: {error}") from error

    def _write(self, copy: _HostCopy) -> None:
        try:
            self._commit(copy)
        except BaseException as error:  # reported by wait(), on the training thread
            self._error = error

    def _commit(self, copy: _HostCopy) -> None:
        """Every process writes its shards into one directory aside and marks them written; the first
        process waits for every mark, then writes the manifest, renames the directory and marks it committed.
        The directory is named by the attempt's shared token, so a killed attempt's leftovers never mix in."""
        final = self.root / f"{STEP_PREFIX}{copy.step}"
        aside = self.root / f".tmp-{STEP_PREFIX}{copy.step}-{self.token}"
        aside.mkdir(parents=True, exist_ok=True)
        futures = []
        for record, shards in zip(copy.records, copy.shards, strict=True):
            futures += write_shards(aside, record, shards)
        for future in futures:
            future.result()
        fsync_tree(aside)
        written = aside / f".written-{self.process_index}"
        written.write_text(json.dumps(copy.fingerprint_sums()))
        fsync_directory(aside)
        if not self.is_primary:
            return
        self._wait_for_every_process(aside, copy.step)
        write_group_marker(aside)
        sums = [json.loads(mark.read_text()) for mark in sorted(aside.glob(".written-*"))]
        records = [
            dataclasses.replace(r, fingerprint=combine(part[r.name] for part in sums)) for r in copy.records
        ]
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            step=copy.step,
            seed=self.seed,
            config=self.config_json,
            arrays=records,
            initialized_from=self.initialized_from,
            versions={"jax": jax.__version__, "meltemi-trainer": metadata.version("meltemi-trainer")},
            state_digest=state_digest((r.name, r.fingerprint) for r in records),
            data_position=DataPosition(copy.step, copy.next_batch),
            tokenizer=self.tokenizer,
            end_of_text=self.end_of_text,
        )
        (aside / MANIFEST).write_text(manifest.to_json())
        for mark in aside.glob(".written-*"):
            mark.unlink()
        fsync_tree(aside)
        if final.exists():  # a stale, uncommitted or older copy of the same step
            shutil.rmtree(final)
        aside.rename(final)
        fsync_directory(self.root)
        (final / COMMITTED).write_text(f"step {copy.step}\n")
        fsync_tree(final)
        self._prune()

    def _wait_for_every_process(self, aside: Path, step: int) -> None:
        deadline = time.monotonic() + self.commit_timeout_s
        while len(list(aside.glob(".written-*"))) < self.process_count:
            if time.monotonic() > deadline:
                done = len(list(aside.glob(".written-*")))
                raise TimeoutError(
                    f"step {step}: only {done} of {self.process_count} processes wrote their shards"
                )
            time.sleep(0.05)

    def _prune(self) -> None:
        """Delete what the retention policy no longer keeps, and what killed attempts left half-written."""
        committed = [s for s, path in step_dirs(self.root) if (path / COMMITTED).exists()]
        keep = set(self.retention.keeps(committed))
        for step, path in step_dirs(self.root):
            if step not in keep:
                shutil.rmtree(path, ignore_errors=True)
        for path in self.root.glob(f".tmp-{STEP_PREFIX}*"):
            if not path.name.endswith(f"-{self.token}"):  # this attempt's other writes may be in flight
                shutil.rmtree(path, ignore_errors=True)


def inspect_checkpoint(path: Path) -> Manifest:
    """The manifest of a committed checkpoint with every array present; else a ``CheckpointError`` says why.

    Reading the values (which checks every chunk's CRC-32C) is left to ``restore``.
    """
    if not (path / COMMITTED).exists():
        raise CheckpointError(f"{path}: not marked complete ({COMMITTED} is missing)")
    try:
        manifest = Manifest.from_json((path / MANIFEST).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: {MANIFEST} is missing") from None
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: {MANIFEST} is damaged ({e})") from None
    for record in manifest.arrays:
        absent = missing_chunks(path, record)
        if absent:
            raise CheckpointError(f"{path}: array {record.name} is missing {absent} of its chunk files")
    return manifest


def find_checkpoints(location: Path) -> list[Path]:
    """The checkpoints a path names, newest first: a ``step-N`` directory, or a run directory's all."""
    location = Path(location)
    if location.name.startswith(STEP_PREFIX) and location.is_dir():
        return [location]
    root = location / "checkpoints" if (location / "checkpoints").is_dir() else location
    return [path for _, path in step_dirs(root)]


def restore(path: Path, manifest: Manifest, abstract_state, shardings, *, prefix: str = ""):
    """Read a checkpoint onto ``shardings`` (any mesh): each device's shard read from its chunks, CRC-checked.

    ``abstract_state`` gives the tree to rebuild (a subtree, such as the model, with ``prefix="model."``).
    An array it needs that the checkpoint lacks, or has in another shape, is a ``ConfigError`` naming it; a
    chunk that fails its checksum or is cut short is a ``CheckpointError``.
    """
    records = {r.name: r for r in manifest.arrays}
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract_state, is_leaf=hax.is_named_array)
    sharding_leaves = jax.tree_util.tree_flatten(shardings, is_leaf=hax.is_named_array)[0]
    restored = []
    for (key_path, leaf), sharding in zip(leaves, sharding_leaves, strict=True):
        name, want = prefix + leaf_name(key_path), _raw(leaf)
        record = records.get(name)
        if record is None:
            raise ConfigError(f"{path}: has no array {name}, which the config's train state needs")
        if record.shape != tuple(want.shape):
            raise ConfigError(
                f"{path}: array {name} has shape {record.shape}, the config's train state needs "
                f"{tuple(want.shape)}"
            )
        target = _raw(sharding)

        def read(index, record=record, dtype=want.dtype):
            return read_array(path, record, index).astype(dtype, copy=False)

        try:
            array = jax.make_array_from_callback(record.shape, target, read)
        except Exception as e:  # TensorStore reports a bad checksum or a truncated chunk
            raise CheckpointError(
                f"{path}: array {name} does not read back: {' '.join(str(e).split())}"
            ) from None
        restored.append(hax.NamedArray(array, leaf.axes) if isinstance(leaf, hax.NamedArray) else array)
    return jax.tree_util.tree_unflatten(treedef, restored)


# Fields whose change makes a checkpoint's arrays or their meaning unusable; the rest (run length,
# intervals, kernels, remat, data, mesh) may change between a checkpoint and its resumption.
BREAKING_FIELDS = (
    "model.vocab_size",
    "model.hidden_dim",
    "model.intermediate_dim",
    "model.num_layers",
    "model.num_heads",
    "model.num_kv_heads",
    "model.head_dim",
    "model.tie_embeddings",
    "model.rope_theta",
    "model.rope_scaling",
    "model.norm_eps",
    "trainer.param_dtype",
)


def incompatible_field(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
    """The first breaking field whose value differs, said plainly, or None.

    >>> incompatible_field({"model": {"hidden_dim": 256}}, {"model": {"hidden_dim": 512}})
    'model.hidden_dim: the checkpoint has 256, the config 512'
    """
    for dotted in BREAKING_FIELDS:
        section, field = dotted.split(".")
        before, now = saved.get(section, {}).get(field), current.get(section, {}).get(field)
        if before != now:
            return f"{dotted}: the checkpoint has {before}, the config {now}"
    return None
