"""The loss curve a finished run leaves in its directory: training loss by step, held-out loss as points."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from meltemi.datastore.storage import Directory
from meltemi.trainer.run_directory import RunDirectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_loss(records: list[dict[str, Any]], run: Directory, name: str = RunDirectory.LOSS_PLOT) -> str:
    """Draw ``train/loss`` and every ``eval/*/loss`` of ``records`` (``metrics.jsonl`` lines) to the PNG
    ``name`` in ``run`` (a local directory or a bucket); returns where it went.

    >>> run = Directory("memory://doc/plot")
    >>> plot_loss([{"step": 1, "train/loss": 3.0}, {"step": 2, "train/loss": 2.0, "eval/loss": 2.2}], run)
    'memory://doc/plot/loss.png'
    >>> run.read_bytes("loss.png")[:4] == b"\\x89PNG"
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5), dpi=110)
    train = [(r["step"], r["train/loss"]) for r in records if isinstance(r.get("train/loss"), float | int)]
    if train:
        axes.plot(*zip(*train, strict=True), label="train", linewidth=1.2)
    for series in held_out_series(records):
        points = [(r["step"], r[series]) for r in records if isinstance(r.get(series), float | int)]
        if not points:
            continue
        axes.plot(*zip(*points, strict=True), marker="o", linestyle="--", label=series.removesuffix("/loss"))
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats per token)")
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend()
    return save_figure(figure, run, name)


def held_out_series(records: list[dict[str, Any]]) -> list[str]:
    """The held-out losses a plot draws: each source's and eval set's, and over all of them only when there
    are several (with one source both are the same line); not the averages over tags or sets.

    >>> held_out_series([{"step": 0, "eval/loss": 2.0, "eval/stdlib/loss": 2.0}])
    ['eval/stdlib/loss']
    >>> held_out_series([{"step": 0, "eval/loss": 2.0, "eval/a/loss": 1.0, "eval/b/loss": 3.0,
    ...                   "eval/macro_loss": 2.0, "eval/paloma/micro_loss": 3.0}])
    ['eval/a/loss', 'eval/b/loss', 'eval/loss']
    """
    names = sorted({k for r in records for k in r if k.startswith("eval/") and k.split("/")[-1] == "loss"})
    per_source = [name for name in names if name != "eval/loss"]
    return per_source if len(per_source) == 1 else names


def save_figure(figure: Figure, run: Directory, name: str) -> str:
    """Write a matplotlib ``figure`` as the PNG ``name`` in ``run`` (through the storage seam, so a bucket
    too), close it, and return where it went."""
    from matplotlib import pyplot as plt

    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    plt.close(figure)
    run.write_bytes(name, png.getvalue())
    return run.where(name)
