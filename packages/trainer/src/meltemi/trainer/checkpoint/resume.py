"""Where a run starts: its own latest good checkpoint (a resumption, with no flag), else its base
(``trainer.initialize_from``: a new phase, started by ``meltemi.trainer.phase``), else a fresh state.

A damaged or incomplete checkpoint is skipped with a one-line warning naming it and the one before it is
used; a checkpoint the config cannot continue (another model shape or vocabulary) is a ``ConfigError``
naming the field, never a silent fresh start. The moving average of the weights (``optimizer.ema``) may be
turned on or off at a resumption, each said in one line: a checkpoint without one starts it from its
weights, and one that has it while the config asks for none goes on without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from meltemi.datastore.errors import PathIsAFileError
from meltemi.datastore.storage import Location
from meltemi.trainer.checkpoint.checkpointer import find_checkpoints, incompatible_field, inspect_checkpoint
from meltemi.trainer.checkpoint.format import Manifest
from meltemi.trainer.checkpoint.restore import restore
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.schedule_extension import continue_schedule
from meltemi.trainer.step.train_step import TrainState


class RunToStart(Protocol):
    """What choosing a start needs of a run (a ``Trainer`` is one): its config, its directory and its
    program (the train state's shapes, shardings and initial value)."""

    config: RunConfig
    run_dir: Location
    program: TrainProgram


@dataclasses.dataclass(frozen=True)
class Start:
    """The state a run starts from, and where it came from (for the log and the manifest): the checkpoint
    it resumed, the base it was initialised from, and the tokens its vocabulary grew by from the base's."""

    state: TrainState
    resumed_from: Location | None
    initialized_from: str | None
    added_tokens: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # newer checkpoints passed over because they do not read back whole
    next_batch: str | None = None  # the hash of the batch the resumed checkpoint recorded for its step

    def data_note(self, batch_hash: str | None) -> str | None:
        """A warning when ``batch_hash``, the hash of the batch the resumed run reads at its first step
        (None when its data ends there), is not the one its checkpoint recorded: the data changed since.

        >>> start = Start(None, Location.parse("r/step-4"), None, next_batch="9f2c")
        >>> start.data_note("9f2c") is None, print(start.data_note("0b11"))
        warning: the batch of step 4 is not the one r/step-4 recorded: the run's data changed since ...
        (True, None)
        """
        if self.resumed_from is None or self.next_batch is None or batch_hash == self.next_batch:
            return None
        step = self.resumed_from.name.removeprefix("step-")
        return (
            f"warning: the batch of step {step} is not the one {self.resumed_from} recorded: the run's data "
            "changed since (its data.* settings, or a store rebuilt), so the run goes on with the data as it "
            "is now, no longer as a run never stopped would (--verify RUN checks each checkpoint's data "
            "position)"
        )

    def resume_line(self) -> str:
        """``resuming from runs/tiny/checkpoints/step-4``, saying which newer ones it skipped and why.

        >>> print(Start(None, Location.parse("r/step-4"), None, skipped=("step-6",)).resume_line())
        resuming from r/step-4, the newest checkpoint that reads back whole (step-6 does not: see above)
        """
        line = f"resuming from {self.resumed_from}"
        if self.skipped:
            names = ", ".join(self.skipped)
            verb = "does" if len(self.skipped) == 1 else "do"
            line += f", the newest checkpoint that reads back whole ({names} {verb} not: see above)"
        return line


def _latest_good(
    location: str | Location, restore_one: Callable, field: str, config_json: dict, warn, skipped=None
) -> tuple | None:
    """The newest checkpoint at ``location`` that reads back whole, restored; each damaged one passed over
    is warned about and its name added to ``skipped``."""
    skipped = [] if skipped is None else skipped
    for path in find_checkpoints(location):
        try:
            manifest = inspect_checkpoint(path)
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            skipped.append(path.location.name)
            continue
        problem = incompatible_field(manifest.config, config_json)
        if problem is not None:
            raise ConfigError(f"{problem}: {field} {path.where()} cannot continue with this config")
        try:
            return restore_one(path, manifest), path.location, manifest
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            skipped.append(path.location.name)
    return None


def continued_config(
    config: RunConfig, run_dir: str | Location, say: Callable[[str], object] = lambda _: None
) -> RunConfig:
    """``config`` as the latest readable checkpoint in ``run_dir`` continues it, reading manifests only:
    refused with the ``ConfigError`` ``starting_state`` would raise when the checkpoint cannot continue it,
    and with its learning-rate schedule carried on (``step.schedule_extension``: a changed run length is
    extended as ``optimizer.extension`` says, and ``say`` is told how). A launcher asks before it starts a
    cluster or writes a file, so a refused launch changes nothing; damaged checkpoints are passed over
    silently here, and the run that starts warns about them."""
    config_json = config.model_dump(mode="json")
    try:
        found = _latest_good(
            run_dir, lambda path, manifest: None, "the run's checkpoint", config_json, lambda _: None
        )
    except PathIsAFileError:
        return config  # no checkpoint lies under a file: the run directory's own check names it
    if found is None:
        return config
    manifest = found[2]
    config, note = continue_schedule(config, manifest.config, manifest.step)
    if note is not None:
        say(note)
    return config


def restore_state(
    path, manifest: Manifest, program: TrainProgram, say: Callable[[str], object]
) -> TrainState:
    """The train state of the checkpoint ``path`` on ``program``'s layout. A checkpoint without an average of
    the weights, when the config keeps one (``optimizer.ema``), starts it as a copy of its weights; one that
    has an average the config does not keep is restored without it. ``say`` is told either, in one line."""
    abstract, shardings = program.abstract_state(), program.state_shardings()
    if abstract.ema is not None and not manifest.has_ema:
        without = dataclasses.replace(abstract, ema=None)
        state = restore(path, manifest, without, dataclasses.replace(shardings, ema=None))
        say(
            f"{path.where()} holds no average of the weights: optimizer.ema's starts from its weights at "
            f"step {manifest.step}"
        )
        return program.with_average_started(state)
    state = restore(path, manifest, abstract, shardings)
    if abstract.ema is None and manifest.has_ema:
        say(
            f"warning: {path.where()} holds an average of the weights (optimizer.ema) and the config keeps "
            "none: the run goes on without it, and its next checkpoints hold none (set optimizer.ema to "
            "keep averaging)"
        )
    return state


def starting_state(
    run: RunToStart,
    warn: Callable[[str], object],
    initialize: Callable[[RunToStart, Callable[[str], object]], Start] | None = None,
) -> Start:
    """Resume, start from the base (``initialize``, given when the config names one), or start fresh, in
    that order of preference. Only reads: a refusal (a ``ConfigError``, a ``CheckpointError``) leaves every
    file as it was."""
    config, program = run.config, run.program
    config_json = config.model_dump(mode="json")

    def whole(path, manifest):
        return restore_state(path, manifest, program, warn)

    skipped: list[str] = []
    found = _latest_good(run.run_dir, whole, "the run's checkpoint", config_json, warn, skipped)
    if found is not None:
        state, path, manifest = found
        added = manifest.added_tokens
        position = manifest.data_position
        recorded = None if position is None else position.next_batch
        return Start(state, path, manifest.initialized_from, added, tuple(skipped), recorded)
    if initialize is not None:
        return initialize(run, warn)
    return Start(program.initial_state(), None, None)
