"""Plan a run without its hardware: the real train step lowered and compiled ahead of time from abstract
shapes on fake devices of the target's count, nothing allocated; parameter count, FLOPs, per-device memory
against the chip's, each parameter's sharding, and the step time a stated MFU implies.

Run it with as many devices as the target has; on a CPU, fake them before JAX starts its backend:
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (``apps/pretrain.py --dry-run`` does this).

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2},
...                    trainer={"global_batch_size": 8}, data={"seq_len": 16}, hardware={"chip": "TPU v4"})
>>> plan = plan_run(config, jax.devices()[:1])
>>> plan.parameter_count, plan.fits
(22688, True)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax

from meltemi.trainer.chips import Chip
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.plan.budget import GIB, MemoryBudget, cpu_plan_notes, planned_attention
from meltemi.trainer.plan.phases import format_phases
from meltemi.trainer.plan.sharding_table import ShardingReport, format_report, sharding_report
from meltemi.trainer.step import compile_cache
from meltemi.trainer.step.flops import flops_per_token
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import CompileReport, TrainProgram


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What a dry run found: sizes, FLOPs, the memory XLA planned per device, and whether it fits its
    ``budget``."""

    budget: MemoryBudget
    devices: int
    layout: MeshPlan
    parameter_count: int
    flops_per_token: float
    tokens_per_step: int  # at the largest batch size
    seq_len: int
    sharding: ShardingReport
    compiled: CompileReport
    mfu: float
    compile_cache: str = "compilation cache not used"  # where it was, and what it saved
    notes: tuple[str, ...] = ()  # how this machine's plan differs from the target's (``cpu_plan_notes``)
    phase_table: str = ""  # steps, tokens, batch, learning rate and mixture by phase (``format_phases``)

    @property
    def chip(self) -> Chip | None:
        return self.budget.chip

    @property
    def fits(self) -> bool:
        return self.budget.fits(self.compiled.peak_bytes)

    @property
    def step_seconds(self) -> float | None:
        """Seconds per step at ``mfu`` of the chip's bf16 peak, over every device."""
        if self.chip is None:
            return None
        return (
            self.flops_per_token
            * self.tokens_per_step
            / (self.mfu * self.chip.peak_bf16_flops * self.devices)
        )


def plan_run(config: RunConfig, devices: Sequence[jax.Device] | None = None, mfu: float = 0.5) -> RunPlan:
    """Lay out and compile ``config``'s train step on ``devices`` (default: all) without allocating it,
    assuming ``mfu`` (a fraction in (0, 1]) of the chip's peak for the step time."""
    if not 0 < mfu <= 1:
        raise ConfigError(f"--mfu {mfu}: the model FLOPs utilisation is a fraction in (0, 1], e.g. 0.5")
    plan = MeshPlan.of(config, devices)
    program = TrainProgram(planned_attention(config, plan.mesh), plan)
    cache = compile_cache.enable_for(config.trainer)
    rows = max(config.trainer.batch_sizes())  # the largest phase's step: the memory the run must fit
    with compile_cache.CacheCounter() as counted:
        _, compiled = program.compile(rows)
    report = sharding_report(config, plan)
    budget = MemoryBudget.of(config.hardware)
    return RunPlan(
        budget=budget,
        devices=plan.mesh.devices.size,
        layout=plan,
        parameter_count=report.parameter_count,
        flops_per_token=flops_per_token(config.model, config.data.seq_len),
        tokens_per_step=rows * config.data.seq_len,
        seq_len=config.data.seq_len,
        sharding=report,
        compiled=compiled,
        mfu=mfu,
        compile_cache=cache.describe() + (f": {counted.describe()}" if cache.enabled else ""),
        notes=cpu_plan_notes(budget, config, plan.mesh),
        phase_table=format_phases(config),
    )


def format_plan(run: RunPlan) -> str:
    """The plan as text: the sharding table, then sizes, memory per device and time per step."""
    c = run.compiled
    average = run.sharding.average_bytes  # optimizer.ema's copy of the parameters
    average = f"their average (optimizer.ema) {average / GIB:.2f} GiB, " if average else ""
    lines = [
        format_report(run.sharding, run.layout),
        run.phase_table,
        f"devices: {run.devices} ({run.chip.name if run.chip else 'chip not set: hardware.chip'}), "
        f"mesh {run.layout.shape}",
        f"parameters: {run.parameter_count:,}",
        f"FLOPs per token: {run.flops_per_token / 1e9:.2f} G; "
        f"per step: {run.flops_per_token * run.tokens_per_step:.3e}",
        f"per device (XLA's plan for the compiled step of {run.tokens_per_step // run.seq_len:,} sequences, "
        "the largest batch):",
        f"  parameters {run.sharding.parameter_bytes / GIB:.2f} GiB, {average}optimizer state "
        f"{run.sharding.optimizer_bytes / GIB:.2f} GiB, "
        f"gradients {run.sharding.gradient_bytes / GIB:.2f} GiB",
        f"  arguments {c.argument_bytes / GIB:.2f} GiB, temporaries {c.temp_bytes / GIB:.2f} GiB, outputs "
        f"not aliased {(c.output_bytes - c.alias_bytes) / GIB:.2f} GiB: peak {c.peak_bytes / GIB:.2f} GiB",
    ]
    lines.append("  " + run.budget.verdict(c.peak_bytes))
    lines += [f"  note: {note}" for note in run.notes]
    if run.step_seconds is not None:
        lines.append(f"step time at {run.mfu:.0%} MFU: {run.step_seconds:.2f} s")
    lines.append(f"compiled ahead of time in {c.seconds:.1f} s (on this machine's CPU compiler)")
    lines.append(run.compile_cache)
    return "\n".join(lines)
