"""Memory made visible: per parameter, its logical axes, its mesh sharding and its bytes per device, and the
totals for parameters, optimizer state and gradients (seqax's habit).

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> from meltemi.trainer.step.mesh import MeshPlan
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2})
>>> report = sharding_report(config, MeshPlan.of(config, jax.devices()[:1]))
>>> report.parameters[0].path, report.parameters[0].axes, report.parameters[0].bytes_per_device
('embed_tokens.weight', ('vocab', 'embed'), 8192)
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import numpy as np

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.config import RunConfig
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.train_step import init_state


@dataclasses.dataclass(frozen=True)
class ParameterLayout:
    """One parameter: dotted path, logical axes, global shape, mesh partition spec, bytes on each device."""

    path: str
    axes: tuple[str, ...]
    shape: tuple[int, ...]
    partition: str
    bytes_per_device: int


@dataclasses.dataclass(frozen=True)
class ShardingReport:
    parameters: list[ParameterLayout]
    parameter_bytes: int
    optimizer_bytes: int
    gradient_bytes: int
    parameter_count: int
    average_bytes: int = 0  # the moving average of the weights (optimizer.ema), as many as the parameters'


def _bytes_on_one_device(abstract, sharding) -> int:
    shape = sharding.shard_shape(abstract.shape)
    return int(np.prod(shape, dtype=np.int64)) * abstract.dtype.itemsize


def _path(path) -> str:
    return ".".join(str(getattr(p, "name", getattr(p, "key", getattr(p, "idx", p)))) for p in path)


def sharding_report(config: RunConfig, plan: MeshPlan) -> ShardingReport:
    """Lay out the train state abstractly (nothing is allocated) and measure each leaf on one device."""
    state = eqx.filter_eval_shape(init_state, config, adapters.jax_key(config.trainer.seed, "init"))
    shardings = plan.parameter_shardings(state)
    layouts = []
    model_pairs = jax.tree_util.tree_leaves_with_path(
        jax.tree_util.tree_map(lambda a, s: (a, s), state.model, shardings.model, is_leaf=hax.is_named_array),
        is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2 and hax.is_named_array(x[0]),
    )
    for path, (named, sharding) in model_pairs:
        layouts.append(
            ParameterLayout(
                path=_path(path),
                axes=tuple(a.name for a in named.axes),
                shape=tuple(a.size for a in named.axes),
                partition=str(sharding.array.spec),
                bytes_per_device=_bytes_on_one_device(named.array, sharding.array),
            )
        )
    optimizer = sum(
        _bytes_on_one_device(a, s)
        for a, s in zip(
            jax.tree_util.tree_leaves(state.opt_state),
            jax.tree_util.tree_leaves(shardings.opt_state),
            strict=True,
        )
    )
    parameter_bytes = sum(p.bytes_per_device for p in layouts)
    return ShardingReport(
        parameters=layouts,
        parameter_bytes=parameter_bytes,
        optimizer_bytes=optimizer,
        gradient_bytes=parameter_bytes,
        parameter_count=sum(int(np.prod(p.shape)) for p in layouts),
        average_bytes=0 if state.ema is None else parameter_bytes,
    )


def format_report(report: ShardingReport, plan: MeshPlan) -> str:
    """The report as a fixed-width table with totals."""
    gib = 2**30
    width = max(len(p.path) for p in report.parameters)
    lines = [f"mesh {plan.shape}", f"{'parameter':<{width}}  {'axes':<40}  {'sharding':<36}  MiB/device"]
    for p in report.parameters:
        axes = ", ".join(f"{a}={n}" for a, n in zip(p.axes, p.shape, strict=True))
        lines.append(f"{p.path:<{width}}  {axes:<40}  {p.partition:<36}  {p.bytes_per_device / 2**20:10.2f}")
    lines += [
        f"parameters: {report.parameter_count:,} ({report.parameter_bytes / gib:.3f} GiB per device)",
        f"optimizer state: {report.optimizer_bytes / gib:.3f} GiB per device",
        f"gradients: {report.gradient_bytes / gib:.3f} GiB per device",
    ]
    return "\n".join(lines)
