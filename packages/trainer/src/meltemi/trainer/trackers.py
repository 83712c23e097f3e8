"""Where metrics go: ``metrics.jsonl`` always, TensorBoard and Weights & Biases when configured, behind one
interface (``log(metrics, step)``, ``close()``).

Keys of tracking services come from the environment (``WANDB_API_KEY``) and are never written anywhere.

>>> import tempfile, json, pathlib
>>> run_dir = pathlib.Path(tempfile.mkdtemp())
>>> tracker = JsonlTracker(run_dir / "metrics.jsonl")
>>> tracker.log({"train/loss": 2.5}, step=3); tracker.close()
>>> json.loads((run_dir / "metrics.jsonl").read_text())
{'step': 3, 'train/loss': 2.5}
"""

from __future__ import annotations

import json
import math
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
    """Scalars in TensorBoard event files under ``<run dir>/tensorboard`` (tensorboardX, no TensorFlow)."""

    def __init__(self, log_dir: Path):
        from tensorboardX import SummaryWriter

        self._writer = SummaryWriter(logdir=str(log_dir))

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
    def for_run(config: TrackersConfig, run_dir: Path, run_config: dict[str, Any]) -> Trackers:
        trackers: list[Tracker] = [JsonlTracker(run_dir / "metrics.jsonl")]
        if config.tensorboard:
            trackers.append(TensorBoardTracker(run_dir / "tensorboard"))
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
