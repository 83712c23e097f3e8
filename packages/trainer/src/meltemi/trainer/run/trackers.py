"""Where metrics go: ``metrics.jsonl`` always, TensorBoard and Weights & Biases when configured, behind one
interface (``log(metrics, step)``, ``close()``).

A run that resumes from an older checkpoint than its record reaches (the newest was damaged, or the process
was killed between two checkpoints) first rewinds the record with ``rewind_record``: the rows of the steps
it will redo move to ``<name>.superseded.jsonl`` beside it, so the record says each step once, and TensorBoard
is told to hide its events from the same step on.

Keys of tracking services come from the environment (``WANDB_API_KEY``) and are never written anywhere.

>>> run = Directory("memory://doc/trackers")
>>> tracker = JsonlTracker(run)
>>> tracker.log({"train/loss": 2.5}, step=3); tracker.close()
>>> read_appended(run, "metrics.jsonl")
b'{"step": 3, "train/loss": 2.5}\\n'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from meltemi.datastore.storage import Appender, Directory, Location, read_appended
from meltemi.datastore.storage.appender import segment_key, segments
from meltemi.trainer.config import TrackersConfig
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.run_directory import RunDirectory

BUCKET_FLUSH_SECONDS = 10.0
"""How long metrics wait before they reach a bucket's run directory (each flush rewrites an object)."""


class Tracker(Protocol):
    """Receives the metrics of a step (names like ``train/loss``, ``eval/web/bpb``)."""

    def log(self, metrics: Mapping[str, float], step: int) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class JsonlTracker:
    """One JSON object per log call, appended to ``metrics.jsonl`` through the storage seam's ``Appender``.

    ``flush_seconds``: lines wait at most this long before they are written (0: at every log call, as
    for a local run directory; a bucket's run directory batches them, since each flush rewrites an
    object); ``flush()`` writes them at once (before a checkpoint, so its step's record is never lost).
    """

    def __init__(self, run: Directory, name: str = RunDirectory.METRICS, flush_seconds: float = 0.0):
        self._log = Appender(run, name, flush_seconds=flush_seconds)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        record = {"step": step, **{k: (v if math.isfinite(v) else str(v)) for k, v in metrics.items()}}
        self._log.append(json.dumps(record))

    def flush(self) -> None:
        self._log.flush()

    def close(self) -> None:
        self._log.flush()


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

    def flush(self) -> None:
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

    def flush(self) -> None:
        """W&B sends its records in the background."""

    def close(self) -> None:
        self._run.finish()


def check_trackers(config: TrackersConfig, run_dir: Location) -> None:
    """TensorBoard and W&B write local files, so they need a local run directory: a ``ConfigError`` naming
    the field otherwise (checked before a launcher starts any host, and again when the trackers open)."""
    for field, wanted in (("tensorboard", config.tensorboard), ("wandb", config.wandb is not None)):
        if wanted and not run_dir.is_local:
            raise ConfigError(
                f"trainer.trackers.{field}: writes local files, but the run directory {run_dir} is "
                "in a bucket; run without it (metrics.jsonl and loss.png are written there)"
            )


class Trackers:
    """Every configured tracker, logged to together."""

    def __init__(self, trackers: Sequence[Tracker]):
        self.trackers = list(trackers)

    @staticmethod
    def for_run(
        config: TrackersConfig, run: Directory, run_config: dict[str, Any], first_step: int = 0
    ) -> Trackers:
        """The trackers ``config`` names, for a session whose first log is at ``first_step`` (the record
        already rewound to it with ``rewind_record``). TensorBoard and W&B write local files, so they need a
        local run directory (a ``ConfigError`` naming the field otherwise)."""
        local = run.location.local_path
        flush_seconds = 0.0 if local is not None else BUCKET_FLUSH_SECONDS
        trackers: list[Tracker] = [JsonlTracker(run, RunDirectory.METRICS, flush_seconds)]
        check_trackers(config, run.location)
        if config.tensorboard:
            trackers.append(TensorBoardTracker(local / "tensorboard", first_step))
        if config.wandb is not None:
            w = config.wandb
            trackers.append(WandbTracker(local, w.project, w.entity, w.mode, run_config))
        return Trackers(trackers)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def flush(self) -> None:
        for tracker in self.trackers:
            tracker.flush()

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def read_metrics(record: str | os.PathLike | Location) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (a path or URL; a torn last line, from a killed run, is skipped).

    >>> tracker = JsonlTracker(Directory("memory://doc/read_metrics"))
    >>> tracker.log({"train/loss": 2.5}, step=3); tracker.close()
    >>> read_metrics("memory://doc/read_metrics/metrics.jsonl")
    [{'step': 3, 'train/loss': 2.5}]
    """
    named = Location.parse(record)
    parent, _, name = named.path.rpartition("/")
    run = Directory(Location(named.scheme, named.bucket, parent, str(named).rstrip("/").rpartition("/")[0]))
    records = []
    for line in read_appended(run, name).decode("utf-8").splitlines():
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
    superseded: str

    def describe(self, record: str, first_step: int) -> str:
        """One line for the log, naming the record and the file that keeps what was set aside."""
        why = (
            "an earlier attempt's, which left no usable checkpoint; this session starts over"
            if first_step == 0
            else "logged by an attempt past the checkpoint this session starts from; it redoes those steps"
        )
        rows = f"{self.lines} rows from step {first_step} on"
        return f"{record}: {rows} ({why}) moved to {self.superseded}"


def superseded_name(name: str) -> str:
    """``metrics.jsonl`` -> ``metrics.superseded.jsonl``."""
    return name.removesuffix(".jsonl") + ".superseded.jsonl"


def rewind_record(run: Directory, name: str, first_step: int) -> Rewound | None:
    """Rewind a step record (``metrics.jsonl``, ``batches.jsonl``, in the run's local directory or bucket)
    for a session that logs from ``first_step`` on: its lines at that step or later, and any line cut short
    by a killed process, are appended to ``<name>.superseded.jsonl`` beside it, then the record is replaced
    by its other lines (one atomic write of its first segment, then its later segments deleted: a crash
    leaves at worst lines set aside twice, never a kept line lost). Returns what was set aside, or None
    (the record untouched) when nothing was.

    >>> run = Directory("memory://doc/rewind")
    >>> run.write_text("metrics.jsonl", '{"step": 0}\\n{"step": 2}\\n{"step": 4}\\n{"step": 6, "tr')
    >>> rewind_record(run, "metrics.jsonl", 3).steps, run.read_text("metrics.jsonl")
    ([4], '{"step": 0}\\n{"step": 2}\\n')
    >>> run.read_text("metrics.superseded.jsonl")
    '{"step": 4}\\n{"step": 6, "tr\\n'
    """
    kept, dropped, steps = [], [], []
    for line in read_appended(run, name).decode("utf-8").splitlines(keepends=True):
        step = _step_of(line) if line.endswith("\n") else None
        if step is not None and step < first_step:
            kept.append(line)
        else:
            dropped.append(line if line.endswith("\n") else line + "\n")
            if step is not None:
                steps.append(step)
    if not dropped:
        return None
    superseded = superseded_name(name)
    with Appender(run, superseded) as aside:
        aside.append("".join(dropped).encode("utf-8"))
    later = [segment_key(name, i) for i in segments(run, name) if i > 0]
    run.write_text(name, "".join(kept))
    for key in later:
        run.delete(key)
    return Rewound(len(dropped), steps, superseded)


def _step_of(line: str) -> int | None:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) else None
