"""Saving and restoring the train state: asynchronous, atomic, checked, kept by policy.

``save`` copies this process's shards of every array to host memory (the step loop waits only for that
copy, since the next step reuses the device buffers) and a background thread writes them, straight into
``step-N/`` of a local directory or a bucket (through ``meltemi.datastore.storage``); at most one write is
in flight, and ``COMMITTED``, written last, makes it visible. ``resume`` finds the newest checkpoint that
is complete and reads back, skipping damaged ones with a one-line warning; ``checkpoint_restore.restore``
reads onto any mesh, each process only what its devices hold.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from importlib import metadata
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

import haliax_lite as hax
from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.checkpoint.digests import describe, fingerprint_sums, state_digest
from meltemi.trainer.checkpoint.format import (
    COMMITTED,
    FORMAT_VERSION,
    MANIFEST,
    ArrayRecord,
    DataPosition,
    Manifest,
    as_directory,
    leaf_name,
    missing_chunks,
    write_group_marker,
    write_shards,
)
from meltemi.trainer.config import TrainerConfig
from meltemi.trainer.data.run_tokenizer import EndOfText, TokenizerRecord
from meltemi.trainer.errors import CheckpointError
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step.distributed import gather_rows, wait_for_every_process

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

STEP_PREFIX = "step-"


def step_dirs(root: str | os.PathLike | Location | Directory) -> list[tuple[int, Directory]]:
    """``(step, directory)`` of every ``step-N`` prefix under ``root`` (committed or not), newest first."""
    root = as_directory(root)
    steps = set()
    for key in root.list(STEP_PREFIX):
        suffix = key.split("/", 1)[0].removeprefix(STEP_PREFIX)
        if suffix.isdigit() and "/" in key:
            steps.add(int(suffix))
    return [(step, root / f"{STEP_PREFIX}{step}") for step in sorted(steps, reverse=True)]


def committed_steps(root: Directory) -> list[int]:
    """The steps under ``root`` whose checkpoint carries its ``COMMITTED`` marker, newest first."""
    return sorted(
        (step for step, _ in step_dirs(root) if root.exists(f"{STEP_PREFIX}{step}/{COMMITTED}")), reverse=True
    )


@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """Which checkpoints stay: every ``keep_every`` steps permanently, and the newest ``keep_last`` (two by
    default: when the newest is damaged later, on a bad disk say, a resume loses only the steps since the
    one before it).

    >>> RetentionPolicy(keep_every=100, keep_last=2).keeps([50, 100, 150, 200, 250])
    [100, 200, 250]
    >>> RetentionPolicy(keep_every=None, keep_last=2).keeps([50, 100, 150])
    [100, 150]
    """

    keep_every: int | None
    keep_last: int = 2

    def keeps(self, steps: list[int]) -> list[int]:
        newest = set(sorted(steps)[-self.keep_last :])
        return sorted(s for s in steps if s in newest or (self.keep_every and s % self.keep_every == 0))


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
    sums: list[jax.Array | np.ndarray]  # digests.fingerprint_sums of the whole arrays

    def fingerprints(self) -> list[str]:
        """Each array's fingerprint (the sums are reduced across processes: every process has them all)."""
        return [describe(sums) for sums in self.sums]


def _host_copy(state, next_batch: str | None) -> _HostCopy:
    named = _named_leaves(state)
    sums = fingerprint_sums([_raw(leaf) for _, leaf in named])  # dispatched before the copies wait
    records, shards = [], []
    for name, leaf in named:
        array = _raw(leaf)
        axes = tuple(a.name for a in leaf.axes) if isinstance(leaf, hax.NamedArray) else None
        chunk = tuple(array.sharding.shard_shape(array.shape))
        records.append(ArrayRecord(name, str(array.dtype), tuple(array.shape), chunk, axes))
        # A copy, not a view: the next step donates (reuses) these device buffers.
        shards.append(
            [(s.index, np.array(s.data, copy=True)) for s in array.addressable_shards if s.replica_id == 0]
        )
    return _HostCopy(int(jax.device_get(state.step)), records, shards, next_batch, sums)


class Checkpointer:
    """The checkpoints of one run directory (``<run dir>/checkpoints/step-N``), local or in a bucket.

    The commit, without rename or polled files: every process writes its shards straight into ``step-N/``
    (in a background thread); once every process's write has finished (``finish_written``, called at a
    step boundary all processes agree on) they gather whether each succeeded in one collective, and process
    0 writes ``manifest.json`` (with the fingerprints every process computed together on the devices when
    the state was saved) and then ``COMMITTED``, one atomic PUT. Until that marker exists the
    checkpoint is invisible; with one process the background thread commits by itself.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike | Location,
        trainer: TrainerConfig,
        config_json: dict[str, Any],
        *,
        initialized_from: str | None = None,
        tokenizer: TokenizerRecord | None = None,
        end_of_text: EndOfText | None = None,
        chat: ChatRecipe | None = None,
        added_tokens: tuple[str, ...] = (),
        process_index: int = 0,
        process_count: int = 1,
    ):
        self.root = RunDirectory.of(run_dir).checkpoints
        self.process_index, self.process_count = process_index, process_count
        self.is_primary = process_index == 0
        self.schedule = SaveSchedule(trainer.checkpoint_every, trainer.checkpoint_every_minutes)
        self.retention = RetentionPolicy(trainer.keep_every, trainer.keep_last)
        self.seed, self.config_json = trainer.seed, config_json
        self.initialized_from = initialized_from
        self.tokenizer, self.end_of_text, self.chat = tokenizer, end_of_text, chat
        self.added_tokens = added_tokens
        self._writer: threading.Thread | None = None
        self._written: _HostCopy | None = None  # the write in flight or awaiting its commit
        self._error: BaseException | None = None
        self.last_save = time.monotonic()
        self.seconds_blocked = 0.0

    def due(self, step: int) -> bool:
        return self.schedule.due(step, (time.monotonic() - self.last_save) / 60)

    def writing(self) -> bool:
        """Whether this process's write is still running (``agree`` on it before ``finish_written``)."""
        return self._writer is not None and self._writer.is_alive()

    def save(self, state, *, wait: bool = False, next_batch: str | None = None) -> Location:
        """Checkpoint ``state``: copy to host now, write in the background (``wait``: committed before
        returning). ``next_batch`` is the hash of the global batch of the state's step (the data position),
        if any. Every process calls it at the same step."""
        started = time.perf_counter()
        self.finish_written()
        copy = _host_copy(state, next_batch)
        self._clear(copy.step)
        self.seconds_blocked += time.perf_counter() - started
        self.last_save = time.monotonic()
        self._written = copy
        self._writer = threading.Thread(
            target=self._write, args=(copy,), name="meltemi-checkpoint", daemon=True
        )
        self._writer.start()
        if wait:
            self.finish_written()
        return (self.root / f"{STEP_PREFIX}{copy.step}").location

    def wait(self) -> None:
        """Block until the write in flight (if any) is committed; re-raise its failure. Every process calls
        it at the same step (it runs a collective when there are several)."""
        self.finish_written()

    def finish_written(self) -> None:
        """Wait for this process's write, then commit it: with several processes, gather every process's
        fingerprint sums and success (one collective) and let process 0 write the manifest and the marker."""
        if self._writer is not None:
            started = time.perf_counter()
            self._writer.join()
            self.seconds_blocked += time.perf_counter() - started
            self._writer = None
            if self.process_count > 1:
                self._commit_gathered()
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(
                f"writing a checkpoint under {self.root.where()} failed: {error}"
            ) from error

    def _commit_gathered(self) -> None:
        copy, self._written = self._written, None
        rows = gather_rows(np.array([int(self._error is None)], np.uint32))  # this process wrote its shards
        failed = [i for i, r in enumerate(rows) if not int(r[0])]
        if failed:
            self._error = self._error or RuntimeError(f"processes {failed} did not write their shards")
            return
        if self.is_primary:
            try:
                self._publish(copy)
            except BaseException as error:
                self._error = error

    def _clear(self, step: int) -> None:
        """Remove what a step-N prefix holds before writing it again (a killed attempt's shards, or a
        damaged checkpoint of the same step): its marker first, so it is never a committed-looking mix."""
        if self.is_primary:
            prefix = f"{STEP_PREFIX}{step}/"
            if self.root.list(prefix):
                self.root.delete(prefix + COMMITTED)
                self.root.delete_prefix(prefix)
        wait_for_every_process(f"checkpoint step {step} cleared")

    def _write(self, copy: _HostCopy) -> None:
        try:
            step = self.root / f"{STEP_PREFIX}{copy.step}"
            futures = []
            for record, shards in zip(copy.records, copy.shards, strict=True):
                futures += write_shards(step, record, shards)
            for future in futures:
                future.result()
            if self.process_count == 1:
                self._publish(copy)
        except BaseException as error:  # reported by finish_written(), on the training thread
            self._error = error

    def _publish(self, copy: _HostCopy) -> None:
        """Process 0, once every process's shards are written: the group marker, the manifest, and last the
        ``COMMITTED`` marker; then the retention policy."""
        step = self.root / f"{STEP_PREFIX}{copy.step}"
        write_group_marker(step)
        prints = copy.fingerprints()
        records = [dataclasses.replace(r, fingerprint=f) for r, f in zip(copy.records, prints, strict=True)]
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
            chat=self.chat,
            added_tokens=self.added_tokens,
        )
        step.write_text(MANIFEST, manifest.to_json())
        step.write_text(COMMITTED, f"step {copy.step}\n")
        self._prune()

    def _prune(self) -> None:
        """Delete what the retention policy no longer keeps, and what killed attempts left uncommitted
        (no other write is in flight while this runs): each marker first, then the rest."""
        keep = set(self.retention.keeps(committed_steps(self.root)))
        for step, _ in step_dirs(self.root):
            if step not in keep:
                self.root.delete(f"{STEP_PREFIX}{step}/{COMMITTED}")
                self.root.delete_prefix(f"{STEP_PREFIX}{step}/")


def inspect_checkpoint(step: str | os.PathLike | Location | Directory) -> Manifest:
    """The manifest of a committed checkpoint with every array present; else a ``CheckpointError`` says why.

    Reading the values (which checks every chunk's CRC-32C) is left to ``restore``.
    """
    step = as_directory(step)
    keys = step.list()
    if COMMITTED not in keys:
        raise CheckpointError(f"{step.where()}: not marked complete ({COMMITTED} is missing)")
    text = step.read_text(MANIFEST)
    if text is None:
        raise CheckpointError(f"{step.where()}: {MANIFEST} is missing")
    try:
        manifest = Manifest.from_json(text, step.where(MANIFEST))
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{step.where()}: {MANIFEST} is damaged ({e})") from None
    for record in manifest.arrays:
        absent = missing_chunks(keys, record)
        if absent:
            raise CheckpointError(
                f"{step.where()}: array {record.name} is missing {absent} of its chunk files"
            )
    return manifest


def find_checkpoints(location: str | os.PathLike | Location | Directory) -> list[Directory]:
    """The checkpoints a path or URL names, newest first: a ``step-N`` prefix, or a run directory's all."""
    place = as_directory(location)
    if place.location.name.startswith(STEP_PREFIX) and place.list(""):
        return [place]
    root = place / RunDirectory.CHECKPOINTS if place.list(f"{RunDirectory.CHECKPOINTS}/") else place
    return [step for _, step in step_dirs(root)]


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
