"""The dry run of using a trained model (evaluating it, sampling from it): its programs lowered and compiled
from abstract shapes on the target's (fake) devices, its parameters laid out as ``load_model`` lays them
out, and the memory XLA plans per device against the chip's. The programs themselves are the later
stages' (``harness.dry_run`` plans the scoring program, ``generate.dry_run`` the sampling ones); this
module holds what they share: the sharded abstract parameters, the compilation, the record and its text.

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> from meltemi.trainer.step.mesh import inference_layout
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2})
>>> layout = inference_layout(config, jax.devices()[:1])
>>> model = sharded_parameters(config, layout)
>>> double, _ = compile_program("double", "the embedding", lambda m: 2 * m.embed_tokens.weight.array,
...                             layout, model)
>>> double.report.argument_bytes >= 64 * 32 * 4, double.shape
(True, 'the embedding')
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np

from meltemi.trainer.checkpoint.trained_model import abstract_model
from meltemi.trainer.config import RunConfig
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.plan.budget import GIB, MemoryBudget, cpu_plan_notes
from meltemi.trainer.step.mesh import InferenceLayout, placed
from meltemi.trainer.step.program import CompileReport


@dataclasses.dataclass(frozen=True)
class ProgramPlan:
    """One compiled program: its name, the shapes it was compiled for (in words), and XLA's memory plan."""

    name: str
    shape: str
    report: CompileReport


@dataclasses.dataclass(frozen=True)
class InferencePlan:
    """What a dry run of ``task`` found: the layout, the parameters' size, each program's memory, and
    whether the largest fits the ``budget``."""

    task: str
    layout: InferenceLayout
    budget: MemoryBudget
    parameter_count: int
    parameter_bytes: int  # on each device
    programs: tuple[ProgramPlan, ...]
    notes: tuple[str, ...] = ()  # how this machine's plan differs from the target's (``cpu_plan_notes``)

    @property
    def peak_bytes(self) -> int:
        return max(p.report.peak_bytes for p in self.programs)

    @property
    def fits(self) -> bool:
        return self.budget.fits(self.peak_bytes)


def sharded_parameters(config: RunConfig, layout: InferenceLayout) -> Llama:
    """``config``'s abstract parameters, each carrying the sharding ``load_model`` would give it."""
    return layout.plan.sharded_parameters(abstract_model(config))


def compile_program(
    name: str,
    shape: str,
    function: Callable,
    layout: InferenceLayout,
    *args: object,
    donate_argnums: tuple[int, ...] = (),
) -> tuple[ProgramPlan, jax.stages.Compiled]:
    """``function`` jitted (its ``donate_argnums`` donated, as it runs), lowered from the abstract ``args``
    (each carrying its sharding) and compiled under ``layout``'s mesh and compute mapping; its plan, and
    the compiled program (whose ``out_info`` is the next program's input)."""
    started = time.perf_counter()
    with placed(layout.plan):
        compiled = jax.jit(function, donate_argnums=donate_argnums).lower(*args).compile()
    return ProgramPlan(name, shape, CompileReport.of(compiled, time.perf_counter() - started)), compiled


def plan_of(
    task: str, config: RunConfig, layout: InferenceLayout, model: Llama, programs: list[ProgramPlan]
) -> InferencePlan:
    """The record of a dry run of ``config`` whose ``programs`` were compiled for ``model``
    (``sharded_parameters`` of ``planned_attention(config)``: its bytes per device are counted from their
    shardings) on ``layout``."""
    leaves = jax.tree.leaves(model)
    per_device = sum(
        int(np.prod(leaf.sharding.shard_shape(leaf.shape), dtype=np.int64)) * leaf.dtype.itemsize
        for leaf in leaves
    )
    count = sum(int(np.prod(leaf.shape, dtype=np.int64)) for leaf in leaves)
    budget = MemoryBudget.of(config.hardware)
    notes = cpu_plan_notes(budget, config, layout.plan.mesh)
    return InferencePlan(task, layout, budget, count, per_device, tuple(programs), notes)


def format_inference_plan(plan: InferencePlan) -> str:
    """The plan as text: the layout and why, the parameters per device, each program's memory, the verdict."""
    chip = plan.budget.chip.name if plan.budget.chip else "chip not set: hardware.chip"
    devices = plan.layout.plan.mesh.devices.size
    lines = [
        f"{plan.task} dry run: {devices} devices ({chip})",
        f"layout: {plan.layout.reason}",
        f"parameters: {plan.parameter_count:,} ({plan.parameter_bytes / GIB:.2f} GiB per device)",
        "per device (XLA's plan for each compiled program):",
    ]
    for program in plan.programs:
        r = program.report
        lines.append(
            f"  {program.name} ({program.shape}): arguments {r.argument_bytes / GIB:.2f} GiB, temporaries "
            f"{r.temp_bytes / GIB:.2f} GiB, outputs not aliased "
            f"{(r.output_bytes - r.alias_bytes) / GIB:.2f} GiB: peak {r.peak_bytes / GIB:.2f} GiB "
            f"(compiled in {r.seconds:.1f} s)"
        )
    lines.append(f"  largest {plan.peak_bytes / GIB:.2f} GiB " + plan.budget.verdict(plan.peak_bytes))
    lines += [f"  note: {note}" for note in plan.notes]
    return "\n".join(lines)
