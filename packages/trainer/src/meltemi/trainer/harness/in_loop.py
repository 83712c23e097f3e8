"""Downstream tasks in the training loop: ``eval.tasks`` run on the model being trained at the first and last
evaluation and every ``eval.every`` steps (by default with every held-out evaluation), each at its own shot
count (``num_fewshot``) and under its alias, their metrics logged beside the held-out loss and drawn in
``downstream.png`` beside ``loss.png``.

The tasks are built (their data read) once, when the trainer starts, so an unknown task or missing data
stops the run before its first step; the harness is imported only when ``eval.tasks`` names some.

>>> from meltemi.trainer.config import RunConfig
>>> downstream_eval(RunConfig(), plan=None) is None
True
"""

from __future__ import annotations

from typing import Any

from meltemi.datastore.storage import Directory
from meltemi.trainer.config import RunConfig
from meltemi.trainer.harness.loading import require_harness
from meltemi.trainer.run.plots import save_figure
from meltemi.trainer.step.mesh import MeshPlan

# the held-out sets' metrics (per set, and per tag of the eval sets: eval/<tag>/macro_loss...), never a task's
HELD_OUT_METRICS = ("loss", "bpb", "micro_loss", "macro_loss", "macro_bpb")


class DownstreamEval:
    """The run's harness tasks, ready to score the model of any step on the run's mesh."""

    def __init__(self, config: RunConfig, plan: MeshPlan | None):
        require_harness("eval.tasks")
        from meltemi.trainer.harness.model import read_tokenizer
        from meltemi.trainer.harness.runner import PreparedTasks

        self.config, self.plan = config, plan
        self.tokenizer = read_tokenizer(config.data.tokenizer, "eval.tasks")
        self.tasks = PreparedTasks.of(config.eval.tasks)

    def run(self, model) -> dict[str, float]:
        """``eval/<task>/<metric>`` of ``model`` (standard errors left out, so no resampling)."""
        from meltemi.trainer.harness.model import MeltemiLM

        lm = MeltemiLM(
            model=model,
            tokenizer=self.tokenizer,
            plan=self.plan,
            compute_dtype=self.config.trainer.compute_dtype,
            batch_size=self.config.eval.batch_size,
        )
        return self.tasks.run(lm, limit=self.config.eval.limit, bootstrap_iters=0, quiet=True).metrics


def downstream_eval(config: RunConfig, plan: MeshPlan | None) -> DownstreamEval | None:
    """The run's ``DownstreamEval``, or None when ``eval.tasks`` is empty."""
    return DownstreamEval(config, plan) if config.eval.tasks else None


DOWNSTREAM_PLOT = "downstream.png"


def plot_downstream(records: list[dict[str, Any]], run: Directory, name: str = DOWNSTREAM_PLOT) -> str | None:
    """One panel per task, each of its metrics by step, from ``metrics.jsonl`` records, as the PNG ``name``
    in ``run`` (a local directory or a bucket); where it went, or None without any task's metric.

    >>> run = Directory("memory://doc/downstream")
    >>> records = [{"step": 0, "eval/loss": 5.0, "eval/t/acc": 0.2}, {"step": 4, "eval/t/acc": 0.4}]
    >>> plot_downstream(records, run)
    'memory://doc/downstream/downstream.png'
    >>> run.read_bytes("downstream.png")[:4] == b"\\x89PNG"
    True
    """
    series: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for record in records:
        for key, value in record.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "eval" and parts[2] not in HELD_OUT_METRICS:
                series.setdefault(parts[1], {}).setdefault(parts[2], []).append((record["step"], value))
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, panels = plt.subplots(1, len(series), figsize=(4.5 * len(series), 4), dpi=110, squeeze=False)
    for axes, (task, metrics) in zip(panels[0], sorted(series.items()), strict=True):
        for metric, points in sorted(metrics.items()):
            axes.plot(*zip(*points, strict=True), marker="o", label=metric)
        axes.set_title(task)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend()
    return save_figure(figure, run, name)
