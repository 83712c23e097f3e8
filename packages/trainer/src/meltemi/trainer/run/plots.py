"""The plots a finished run leaves in its directory: the loss curve (training loss by step, held-out loss as
points), and the norms of its parameters, gradients and updates by layer group (``trainer.watch``)."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from meltemi.datastore.storage import Directory
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step.norms import PREFIXES, TOTAL, group_norms

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


def plot_norms(
    records: list[dict[str, Any]], run: Directory, name: str = RunDirectory.NORMS_PLOT
) -> str | None:
    """Draw ``trainer.watch``'s norms of ``records`` (``metrics.jsonl`` lines) to the PNG ``name`` in ``run``:
    one panel each for the parameters, the gradient and the update, each layer group's norm by step on a log
    scale (a stacked parameter's layers combined: ``layers.mlp.up_proj.weight``); where it went, or None
    when the records hold none.

    >>> run = Directory("memory://doc/norms")
    >>> records = [{"step": 10, "params/norm/lm_head.weight": 3.0, "grad/norm/layers.0.w": 0.5},
    ...            {"step": 20, "params/norm/lm_head.weight": 3.5, "grad/norm/layers.0.w": 0.25}]
    >>> plot_norms(records, run)
    'memory://doc/norms/norms.png'
    >>> plot_norms([{"step": 10, "train/loss": 2.0}], run) is None
    True
    """
    series: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for record in records:
        for prefix, groups in group_norms(record).items():
            for group, value in groups.items():
                if value > 0 and math.isfinite(value):  # log scale: no zero update of a skipped step
                    series.setdefault(prefix, {}).setdefault(group, []).append((record["step"], value))
    panels = [prefix for prefix in PREFIXES.values() if prefix in series]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = sorted({group for prefix in panels for group in series[prefix]}, key=lambda g: (g == TOTAL, g))
    colors = plt.get_cmap("tab20")
    style = {  # a color per layer group, the same in every panel (tab20's dark shades, then its light)
        group: {"color": "black", "linewidth": 1.8, "linestyle": "--"}
        if group == TOTAL
        else {"color": colors((2 * i) % 20 + (2 * i) // 20 % 2), "linewidth": 1.1}
        for i, group in enumerate(names)
    }
    figure, axes_row = plt.subplots(
        1, len(panels), figsize=(5 * len(panels) + 2.5, 4.5), dpi=110, squeeze=False
    )
    for axes, prefix in zip(axes_row[0], panels, strict=True):
        for group in names:
            if group in series[prefix]:
                points = series[prefix][group]
                axes.plot(*zip(*points, strict=True), label=group.removesuffix(".weight"), **style[group])
        axes.set_yscale("log")
        axes.set_title(f"{prefix}/norm")
        axes.set_xlabel("step")
        axes.grid(alpha=0.3, which="both")
    handles: dict[str, Any] = {}  # one legend for every panel, beside the last
    for axes in axes_row[0]:
        for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    axes_row[0][-1].legend(
        list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8
    )
    return save_figure(figure, run, name)
