"""What a run evaluates, and when: the held-out loss of every source and eval set (every
``trainer.eval_every`` steps), the harness's tasks (``eval.every``), and, once ``optimizer.ema``'s average has
moved apart from the weights, the same of the average as ``eval/ema/...`` (Levanter's names: ``eval/loss`` is
the weights' as trained, ``eval/ema/loss`` the average's).

The held-out batches run through one jitted eval step per batch size, on the train step's batch layout
(``TrainProgram.device_batch``); a held-out split smaller than a batch is one partial batch padded with rows
that count nothing (the data stage's), so no other program compiles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_data import RunData
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.distributed import wait_for_every_process
from meltemi.trainer.step.eval_step import BatchSums, make_eval_step, summarize
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.reuse import PROGRAMS, program_key
from meltemi.trainer.step.train_step import TrainState


class Tasks(Protocol):
    """The harness's tasks as evaluation runs them (``harness.in_loop``'s): their metrics of a model."""

    def run(self, model: Llama) -> Mapping[str, float]: ...


class Evaluation:
    """A run's evaluation of ``config`` on ``plan``'s mesh over ``data``'s held-out sets (with ``tasks`` when
    the run has them): call it with a train state for its metrics; ``due(step)`` says whether anything is
    evaluated after that step besides the run's first and last evaluation."""

    def __init__(
        self, config: RunConfig, plan: MeshPlan, program: TrainProgram, data: RunData, tasks: Tasks | None
    ):
        self.config, self.plan, self.program, self.data, self.tasks = config, plan, program, data, tasks
        self._jitted = None
        self._compiled: set[int] = set()  # batch sizes every process has compiled (multi-process runs)

    def step_program(self):
        """The jitted eval step, ``(model, batch, byte_lengths) -> BatchSums``, replicated out."""
        if self._jitted is None:
            step, compute = make_eval_step(self.config), self.plan.compute_mapping

            def in_mapping(model, batch, byte_lengths):
                with hax.axis_mapping(compute):
                    return step(model, batch, byte_lengths)

            key, replicated = program_key("eval step", self.config, self.plan), self.plan.replicated()
            self._jitted = PROGRAMS.get(key, lambda: jax.jit(in_mapping, out_shardings=replicated))
        return self._jitted

    def __call__(self, state: TrainState, at: int | None = None) -> dict[str, float]:
        """The metrics of ``state``: at a step ``at`` of the run only what is due then, else everything; the
        held-out sets first, the tasks after them, then the same of the average of the weights."""
        held_out, tasks = self._due(at)
        metrics = self.held_out(state.model) if held_out else {}
        if self.tasks is not None and tasks:
            metrics.update(self.tasks.run(state.model))
        if self._average_differs(state):
            averaged = self(dataclasses.replace(state, model=state.ema, ema=None), at)
            metrics.update({f"eval/ema/{key.removeprefix('eval/')}": v for key, v in averaged.items()})
        return metrics

    def held_out(self, model: Llama) -> dict[str, float]:
        """Held-out loss (and bits per byte with a tokenizer) of every source and eval set, over each one's
        ``eval_steps`` batches, summarized per source, tag and overall (``eval_step.summarize``)."""
        program = self.step_program()
        table = self.data.token_bytes if self.data.token_bytes is not None else np.zeros(1, np.int32)
        lengths = jnp.asarray(np.pad(table, (0, max(0, self.config.model.vocab_size - len(table)))))
        per_source = {}
        with jax.set_mesh(self.plan.mesh):
            for name, loader in self.data.held_out.items():
                sums = BatchSums(0.0, 0.0, 0.0)
                for step in range(self.data.eval_steps[name]):
                    rows = loader.schedule.size(step)
                    batch = self.program.device_batch(loader.batch(step), rows)
                    if jax.process_count() > 1 and rows not in self._compiled:
                        # every process compiles it before any runs it (see the wait)
                        program.lower(model, batch, lengths).compile()
                        wait_for_every_process("eval step compiled")
                        self._compiled.add(rows)
                    part = jax.device_get(program(model, batch, lengths))
                    sums = BatchSums(
                        sums.loss + part.loss, sums.tokens + part.tokens, sums.bytes + part.bytes
                    )
                per_source[name] = sums
        return summarize(per_source, self.data.token_bytes is not None, self.data.eval_set_tags)

    def due(self, step: int) -> bool:
        """Whether the run evaluates anything after ``step`` steps, besides its first and last evaluation:
        the held-out sets every ``trainer.eval_every`` steps, ``eval.tasks`` every ``eval.every``."""
        return any(self._due(step))

    def _due(self, step: int | None) -> tuple[bool, bool]:
        """Whether the held-out sets and the tasks are evaluated at ``step`` (None: both, as at the first and
        last evaluation)."""
        if step is None:
            return True, True
        held_every = self.config.trainer.eval_every
        task_every = held_every if self.config.eval.every is None else self.config.eval.every
        held_out = held_every > 0 and step % held_every == 0
        return held_out, self.tasks is not None and task_every > 0 and step % task_every == 0

    def _average_differs(self, state: TrainState) -> bool:
        """Whether ``state`` keeps an average of its weights (``optimizer.ema``) that has moved apart from
        them: past its ``start_step`` (until then it is a copy of the weights)."""
        ema = self.config.optimizer.ema
        return state.ema is not None and ema is not None and int(jax.device_get(state.step)) > ema.start_step
