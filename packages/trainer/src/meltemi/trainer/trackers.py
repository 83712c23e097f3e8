"""Where metrics go: ``metrics.jsonl`` always, TensorBoard and Weights & Biases when configured, behind one
interface (``log(metrics, step)``, ``close()``).

A run that resumes from an older checkpoint than its record reaches (the newest was damaged, or the process
was killed between two checkpoints) first rewinds the record with ``rewind_record``: the rows of the steps
it will redo move to ``<name>.superseded.jsonl`` beside it, so the record says each step once, and TensorBoard
is told to hide its events from the same step on.

Keys of tracking services come from the environment (``WANDB_API_KEY``) and are never written anywhere.

>>> import tempfile, json, pathlib
>>> run_dir = pathlib.Path(tempfile.mkdtemp())
>>> tracker = JsonlTracker(run_dir / "metrics.jsonl")
>>> tracker.log({"train/loss": 2.5}, step=3); tracker.close()
>>> json.loads((run_dir / "metrics.jsonl").read_text())
{'step': 3, 'train/loss': 2.5}
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from meltemi.trainer.config import TrackersConfig


class Tracker(Protocol):
    """Receives the metrics of a step (names like ``train/loss``, ``eval/web/bpb``)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlTracker:
    """One JSON object per log call, appended and flushed, so a killed run keeps every line it logged."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class TensorBoardTracker:
    """Scalars in TensorBoard event files under ``<run dir>/tensorboard`` (tensorboardX, no TensorFlow).
    ``first_step``: TensorBoard hides the events earlier sessions logged at this step or later (they were
    rolled back)."""

    def __init__(self, log_dir: Path, first_step: int = 0):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir=str(log_dir), purge_step=first_step)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbTracker:
    """A Weights & Biases run (``offline`` writes under ``<run dir>/wandb`` for a later ``wandb sync``)."""

    def __init__(self, run_dir: Path, project: str, entity: str | None, mode: str, config: dict[str, Any]):
        import wandb

        self._run = wandb.init(
            project=project, entity=entity, mode=mode, dir=str(run_dir), name=run_dir.name, config=config
        )

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self._run.log(dict(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class Trackers:
    """Every configured tracker, logged to together."""

    def __init__(self, trackers: Sequence[Tracker]):
        self.trackers = list(trackers)

    @staticmethod
    def for_run(
        config: TrackersConfig, run_dir: Path, run_config: dict[str, Any], first_step: int = 0
    ) -> Trackers:
        """The trackers ``config`` names, for a session whose first log is at ``first_step`` (the record
        already rewound to it with ``rewind_record``)."""
        trackers: list[Tracker] = [JsonlTracker(run_dir / "metrics.jsonl")]
        if config.tensorboard:
            trackers.append(TensorBoardTracker(run_dir / "tensorboard", first_step))
        if config.wandb is not None:
            w = config.wandb
            trackers.append(WandbTracker(run_dir, w.project, w.entity, w.mode, run_config))
        return Trackers(trackers)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a torn last line, from a killed run, is skipped)."""
    records = []
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


@dataclasses.dataclass(frozen=True)
class Rewound:
    """What ``rewind_record`` set aside: how many lines, the steps of the whole ones, and where they went."""

    lines: int
    steps: list[int]
    superseded: Path

    def describe(self, record: Path, first_step: int) -> str:
        """One line for the log, naming the record and the file that keeps what was set aside."""
        why = (
            "an earlier attempt's, which left no usable checkpoint; this session starts over"
            if first_step == 0
            else "logged by an attempt past the checkpoint this session starts from; it redoes those steps"
        )
        rows = f"{self.lines} rows from step {first_step} on"
        return f"{record.name}: {rows} ({why}) moved to {self.superseded.name}"


def rewind_record(path: Path, first_step: int) -> Rewound | None:
    """Rewind a step record (``metrics.jsonl``, ``batches.jsonl``) for a session that logs from ``first_step``
    on: its lines at that step or later, and any line cut short by a killed process, are appended to
    ``<name>.superseded.jsonl`` beside it, then the record is replaced by its other lines (written aside,
    flushed, renamed over it: a crash leaves the old record or the new one, never a mix; at worst the
    set-aside lines are set aside twice). Returns what was set aside, or None (the file untouched) when
    nothing was.

    >>> import tempfile, pathlib
    >>> record = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
    >>> _ = record.write_text('{"step": 0}\\n{"step": 2}\\n{"step": 4}\\n{"step": 6, "tr')
    >>> rewind_record(record, 3).steps, record.read_text()
    ([4], '{"step": 0}\\n{"step": 2}\\n')
    >>> (record.parent / "metrics.superseded.jsonl").read_text()
    '{"step": 4}\\n{"step": 6, "tr\\n'
    """
    if not path.exists():
        return None
    kept, dropped, steps = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        step = _step_of(line) if line.endswith("\n") else None
        if step is not None and step < first_step:
            kept.append(line)
        else:
            dropped.append(line if line.endswith("\n") else line + "\n")
            if step is not None:
                steps.append(step)
    if not dropped:
        return None
    superseded = path.with_name(path.name.removesuffix(".jsonl") + ".superseded.jsonl")
    with open(superseded, "a", encoding="utf-8") as f:
        f.write("".join(dropped))
        f.flush()
        os.fsync(f.fileno())
    aside = path.with_name(f".{path.name}.rewinding")
    with open(aside, "w", encoding="utf-8") as f:
        f.write("".join(kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(aside, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return Rewound(len(dropped), steps, superseded)


def _step_of(line: str) -> int | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None
