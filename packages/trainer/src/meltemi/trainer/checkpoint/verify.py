"""Auditing a run's checkpoints: recompute what each one records of itself and say which match.

Every checkpoint records a fingerprint of each array (``meltemi.trainer.checkpoint.digests``), a digest of
the whole state (parameters and optimizer state), its data position (the hash of the global batch a
resumption reads first) and its tokenizer's SHA-256. ``verify_run`` reads every array back (checksums
included) and recomputes the fingerprints, rebuilds the data from the stores the checkpoint's config names
and hashes that batch again, and hashes the run's tokenizer: a checkpoint whose values, data or tokenizer
are not what it recorded is reported by name, with what differs.

>>> import jax, tempfile
>>> from pathlib import Path
>>> from meltemi.trainer.checkpoint.checkpointer import Checkpointer
>>> from meltemi.trainer.config import RunConfig
>>> from meltemi.trainer.step.train_step import init_state
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 16, "intermediate_dim": 32, "num_layers": 1,
...                           "num_heads": 2, "num_kv_heads": 1})
>>> run = Path(tempfile.mkdtemp())
>>> saved = Checkpointer(run, config.trainer, config.model_dump(mode="json")).save(
...     init_state(config, jax.random.key(0)), wait=True)
>>> report = verify_run(run)
>>> report.ok, [(c.step, c.state, c.data) for c in report.checkpoints]
(True, [(0, 'match', 'unrecorded')])
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

from meltemi.datastore.storage import Directory, Location, check_readable
from meltemi.trainer.checkpoint.checkpointer import find_checkpoints, inspect_checkpoint
from meltemi.trainer.checkpoint.digests import fingerprints, state_digest
from meltemi.trainer.checkpoint.format import Manifest, as_directory, read_array
from meltemi.trainer.checkpoint.trained_model import run_of
from meltemi.trainer.data.run_tokenizer import run_tokenizer
from meltemi.trainer.errors import CheckpointError, TrainerError

StateVerdict = Literal["match", "differs", "unreadable", "unrecorded"]
DataVerdict = Literal["match", "differs", "unavailable", "unrecorded"]


@dataclasses.dataclass(frozen=True)
class CheckpointCheck:
    """One checkpoint's audit. ``state``: its arrays against their recorded fingerprints and digest;
    ``data``: its data position rebuilt from the stores (``unavailable`` when they cannot be opened);
    ``problems``: what differs or does not read back; ``notes``: what could not be checked."""

    path: Location
    step: int | None
    state: StateVerdict
    data: DataVerdict
    state_digest: str | None
    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Nothing recorded was found to differ, and every array reads back."""
        return not self.problems

    def describe(self) -> str:
        """``step-4: state match, data match`` and then each problem and note."""
        head = f"{self.path.name}: state {self.state}, data {self.data}"
        return "; ".join([head, *self.problems, *self.notes])


@dataclasses.dataclass(frozen=True)
class RunVerification:
    """The audit of every checkpoint a location holds, newest first."""

    location: Location
    checkpoints: tuple[CheckpointCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checkpoints)

    def describe(self) -> str:
        """One line per checkpoint."""
        return "\n".join(c.describe() for c in self.checkpoints)


def _check_state(path: Directory, manifest: Manifest) -> tuple[StateVerdict, list[str], list[str]]:
    problems, notes, recorded = [], [], True
    unreadable = False
    for record in manifest.arrays:
        try:
            values = read_array(path, record)
        except Exception as error:  # TensorStore reports a bad checksum or a truncated chunk
            problems.append(f"array {record.name} does not read back: {' '.join(str(error).split())}")
            unreadable = True
            continue
        if record.fingerprint is None:
            recorded = False
            continue
        (found,) = fingerprints([values])
        if found != record.fingerprint:
            problems.append(
                f"array {record.name}: fingerprint {found}, the manifest records {record.fingerprint}"
            )
    if recorded and manifest.state_digest is not None:
        digest = state_digest((r.name, r.fingerprint) for r in manifest.arrays)
        if digest != manifest.state_digest:
            problems.append(f"state digest {digest[:16]}, the manifest records {manifest.state_digest[:16]}")
    if unreadable:
        return "unreadable", problems, notes
    if problems:
        return "differs", problems, notes
    if not recorded or manifest.state_digest is None:
        notes.append("written before checkpoints recorded fingerprints")
        return "unrecorded", problems, notes
    return "match", problems, notes


def _check_data(manifest: Manifest) -> tuple[DataVerdict, list[str], list[str]]:
    position = manifest.data_position
    if position is None or position.next_batch is None:
        return "unrecorded", [], []
    from meltemi.trainer.config_io import validate
    from meltemi.trainer.data.run_data import open_data
    from meltemi.trainer.step.distributed import batch_hash

    try:
        data = open_data(validate(manifest.config, where="the checkpoint's config", recorded=True))
        found = batch_hash(data.train.batch(position.step))
    except (TrainerError, OSError, IndexError) as error:
        return "unavailable", [], [f"data not checked: {error}"]
    if found != position.next_batch:
        return "differs", [f"the batch of step {position.step} hashes to {found}, the manifest records "
                           f"{position.next_batch}"], []  # fmt: skip
    return "match", [], []


def verify_checkpoint(step: str | os.PathLike | Location | Directory) -> CheckpointCheck:
    """Audit one ``step-N`` directory (or bucket prefix)."""
    path = as_directory(step)
    try:
        manifest = inspect_checkpoint(path)
    except CheckpointError as error:
        return CheckpointCheck(path.location, None, "unreadable", "unrecorded", None, (str(error),), ())
    state, problems, notes = _check_state(path, manifest)
    data, data_problems, data_notes = _check_data(manifest)
    if manifest.tokenizer is not None:
        try:
            run_tokenizer(run_of(path), manifest.tokenizer)
        except CheckpointError as error:
            problems.append(str(error))
    return CheckpointCheck(
        path.location,
        manifest.step,
        state,
        data,
        manifest.state_digest,
        (*problems, *data_problems),
        (*notes, *data_notes),
    )


def verify_run(location: str | os.PathLike | Location) -> RunVerification:
    """Audit every checkpoint of a run directory, or one ``step-N`` directory (local or in a bucket); a
    location without any is a ``CheckpointError`` naming it."""
    place = as_directory(location)
    check_readable(place.location)  # a missing bucket or refused credentials: one line first
    found = find_checkpoints(place)
    if not found:
        note = place.location.found_empty_note
        raise CheckpointError(f"{place.where()} holds no checkpoint (looked for step-N directories){note}")
    return RunVerification(place.location, tuple(verify_checkpoint(path) for path in found))
