"""The train step of a config on a mesh, as a program: abstract shapes, shardings, the step-0 state, and the
step compiled ahead of time (from shapes alone: nothing is allocated, which is what a dry run needs).

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> from meltemi.trainer.step.mesh import MeshPlan
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2},
...                    trainer={"global_batch_size": 2, "compute_dtype": "float32"}, data={"seq_len": 16})
>>> program = TrainProgram(config, MeshPlan.of(config, jax.devices()[:1]))
>>> compiled, report = program.compile()
>>> report.temp_bytes > 0
True
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import HostMemoryError
from meltemi.trainer.step.distributed import wait_for_every_process
from meltemi.trainer.step.host_memory import HostMemory
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.reuse import PROGRAMS, STEP_SCHEDULE, program_key
from meltemi.trainer.step.train_step import (
    StepSchedule,
    TrainState,
    copy_weights,
    init_state,
    make_train_step,
    step_schedule,
)


@dataclasses.dataclass(frozen=True)
class CompileReport:
    """What compiling a program (the train step, the scoring or sampling programs) cost, and the per-device
    memory XLA planned for it."""

    seconds: float
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int

    @property
    def peak_bytes(self) -> int:
        """Arguments, outputs not aliased to (donated) arguments, and temporaries: the step's footprint."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes

    @staticmethod
    def of(compiled: jax.stages.Compiled, seconds: float) -> CompileReport:
        """The memory XLA planned for ``compiled`` (zeros where the backend does not say)."""
        memory = compiled.memory_analysis()
        return CompileReport(
            seconds=seconds,
            argument_bytes=int(getattr(memory, "argument_size_in_bytes", 0)),
            output_bytes=int(getattr(memory, "output_size_in_bytes", 0)),
            alias_bytes=int(getattr(memory, "alias_size_in_bytes", 0)),
            temp_bytes=int(getattr(memory, "temp_size_in_bytes", 0)),
        )

    def line(self, what: str, mesh_shape: object) -> str:
        """What compiling ``what`` cost, in one line.

        >>> print(CompileReport(1.25, 2**30, 0, 0, 2**29).line("the step", {"data": 8}))
        compiled the step in 1.2 s; per device: arguments 1.00 GiB, temporaries 0.50 GiB; mesh {'data': 8}
        """
        gib = 2**30
        arguments, temporaries = self.argument_bytes / gib, self.temp_bytes / gib
        return (
            f"compiled {what} in {self.seconds:.1f} s; per device: arguments {arguments:.2f} GiB, "
            f"temporaries {temporaries:.2f} GiB; mesh {mesh_shape}"
        )


class TrainProgram:
    """The jitted train step of ``config`` on ``plan``'s mesh, compiled once per global batch size."""

    def __init__(self, config: RunConfig, plan: MeshPlan):
        self.config, self.plan = config, plan
        self._jitted: dict[tuple[int, float], Callable] = {}
        self._compiled: dict[tuple[int, float], jax.stages.Compiled] = {}
        self._schedule: Callable[[jax.Array], StepSchedule] | None = None
        self._abstract_state: TrainState | None = None
        self._state_shardings = None
        self._batch_layouts: dict[int, dict[str, tuple[jax.sharding.Sharding, tuple[int, ...]]]] = {}

    def abstract_state(self) -> TrainState:
        """The train state's shapes and dtypes (nothing allocated; traced once per config in a process)."""
        if self._abstract_state is None:

            def trace() -> TrainState:
                key = jax.eval_shape(lambda: adapters.jax_key(self.config.trainer.seed, "init"))
                return eqx.filter_eval_shape(init_state, self.config, key)

            self._abstract_state = PROGRAMS.get(self._key("state shapes"), trace)
        return self._abstract_state

    def _key(self, kind: str, *extra) -> tuple:
        """What a program of this config and mesh is kept under in the process (``step.reuse``)."""
        return program_key(kind, self.config, self.plan, *extra)

    def state_shardings(self):
        """Where each leaf of the state lives: the parameter axis mapping on the mesh."""
        if self._state_shardings is None:
            self._state_shardings = self.plan.parameter_shardings(self.abstract_state())
        return self._state_shardings

    def abstract_batch(self, global_batch_size: int) -> adapters.NamedBatch:
        """A global batch's shapes and dtypes."""
        shape = (global_batch_size, self.config.data.seq_len)
        host = {
            "input_ids": jax.ShapeDtypeStruct(shape, jnp.int32),
            "targets": jax.ShapeDtypeStruct(shape, jnp.int32),
            "segment_ids": jax.ShapeDtypeStruct(shape, jnp.int32),
            "positions": jax.ShapeDtypeStruct(shape, jnp.int32),
            "loss_mask": jax.ShapeDtypeStruct(shape, jnp.bool_),
            "source": jax.ShapeDtypeStruct(shape[:1], jnp.int32),
        }
        return jax.eval_shape(adapters.named_batch, host)

    def device_batch(self, local: dict[str, np.ndarray], global_rows: int) -> adapters.NamedBatch:
        """This process's rows of a batch (the data's host arrays: the train batches', the held-out sets'
        alike), assembled with the other processes' into one global named batch of ``global_rows`` rows laid
        out as the step computes on it. The layout is traced once per batch size, not once per step."""
        host = adapters.batch_host_arrays(local)
        if global_rows not in self._batch_layouts:
            shapes = self.abstract_batch(global_rows)
            shardings = self.plan.compute_shardings(shapes)
            self._batch_layouts[global_rows] = {
                name: (getattr(shardings, name).array, getattr(shapes, name).array.shape) for name in host
            }
        arrays = {
            name: jax.make_array_from_process_local_data(sharding, host[name], shape)
            for name, (sharding, shape) in self._batch_layouts[global_rows].items()
        }
        return adapters.named_batch(arrays)

    def initial_state(self) -> TrainState:
        """The step-0 state, created directly in its sharded layout."""
        key = adapters.jax_key(self.config.trainer.seed, "init")
        config, shardings = self.config, self.state_shardings()
        make = PROGRAMS.get(
            self._key("initial state"), lambda: jax.jit(partial(init_state, config), out_shardings=shardings)
        )
        with jax.set_mesh(self.plan.mesh):
            return make(key)

    def with_average_started(self, state: TrainState) -> TrainState:
        """``state`` with its average of the weights (``optimizer.ema``) started afresh as a copy of its
        weights, laid out as they are: a run whose checkpoint or base has no average begins one there."""
        shardings = self.state_shardings().ema
        key = self._key("average started")
        copy = PROGRAMS.get(key, lambda: jax.jit(copy_weights, out_shardings=shardings))
        with jax.set_mesh(self.plan.mesh):
            ema = copy(state.model)
        return dataclasses.replace(state, ema=ema)

    def _variant(self, rows: int | None, z_loss_weight: float | None) -> tuple[int, float]:
        """The batch size and z-loss weight a step is compiled for: those given, else the run's first."""
        weight = self.config.model.z_loss_at(0) if z_loss_weight is None else z_loss_weight
        return rows or self.config.trainer.batch_sizes()[0], weight

    def jitted(self, global_batch_size: int | None = None, z_loss_weight: float | None = None):
        """The jitted step: the state laid out by the parameter mapping (donated), the batch by compute; one
        per batch size (the batch's shardings name its axes, sizes included) and z-loss weight
        (``model.z_loss_weight`` by step); by default the first of each."""
        rows, weight = self._variant(global_batch_size, z_loss_weight)
        if (rows, weight) not in self._jitted:
            self._jitted[rows, weight] = PROGRAMS.get(
                self._key("train step", rows, weight), lambda: self._jit_step(rows, weight)
            )
        return self._jitted[rows, weight]

    def _jit_step(self, rows: int, weight: float):
        """The step jitted for ``rows`` rows and z-loss ``weight``, under the compute mapping."""
        step = make_train_step(self.config, self.abstract_state().model, weight)
        compute = self.plan.compute_mapping

        def in_mapping(state, batch, schedule):
            with hax.axis_mapping(compute):
                return step(state, batch, schedule)

        batch = self.abstract_batch(rows)
        return jax.jit(
            in_mapping,
            in_shardings=(self.state_shardings(), self.plan.compute_shardings(batch), self.plan.replicated()),
            out_shardings=(self.state_shardings(), self.plan.replicated()),
            donate_argnums=0,
        )

    def step_schedule(self, step: jax.Array) -> StepSchedule:
        """What the run's schedule gives the step from ``step`` (the state's): its learning rate and whether
        it computes the watched norms, from the schedule's own small program. The train step takes them as
        an argument, so runs that differ only in their length or schedule share their step."""
        if self._schedule is None:  # found once: a key is the config's JSON, too dear for every step
            config, replicated = self.config, self.plan.replicated()
            self._schedule = PROGRAMS.get(
                self._key(STEP_SCHEDULE), lambda: jax.jit(step_schedule(config), out_shardings=replicated)
            )
        with jax.set_mesh(self.plan.mesh):
            return self._schedule(step)

    @staticmethod
    def abstract_schedule() -> StepSchedule:
        """The shapes and dtypes of what the train step takes from the schedule."""
        return StepSchedule(jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((), jnp.bool_))

    def compile(
        self, global_batch_size: int | None = None, z_loss_weight: float | None = None
    ) -> tuple[jax.stages.Compiled, CompileReport]:
        """Lower from abstract shapes and compile for a batch size and z-loss weight (default: the first
        of each); kept for ``step``."""
        rows, weight = self._variant(global_batch_size, z_loss_weight)
        started = time.perf_counter()
        with jax.set_mesh(self.plan.mesh):
            jitted = self.jitted(rows, weight)
            compiled = jitted.lower(
                self.abstract_state(), self.abstract_batch(rows), self.abstract_schedule()
            ).compile()
        report = CompileReport.of(compiled, time.perf_counter() - started)
        self._compiled[rows, weight] = compiled
        return compiled, report

    def step(
        self, state: TrainState, batch: adapters.NamedBatch, rows: int, z_loss_weight: float | None = None
    ):
        """The train step (``step.train_step``'s, jitted and compiled for this batch size and z-loss weight;
        compiled first when it is new, then waiting for the other processes to have compiled it too) on
        ``state`` and a global ``batch`` (``device_batch``): the new state and the step's metrics."""
        rows, weight = self._variant(rows, z_loss_weight)
        if (rows, weight) not in self._compiled:
            self.compile(rows, weight)
            wait_for_every_process(f"train step compiled for {rows} rows and z-loss weight {weight}")
        return self._compiled[rows, weight](state, batch, self.step_schedule(state.step))

    def check_host_memory(self, report: CompileReport) -> None:
        """On a CPU, refuse a train step (compiled with ``report``) larger than the memory this machine has
        (its devices share it): such a run would be killed by the system at its first step, or swap for
        hours, after making its state. A ``HostMemoryError`` says how to fit."""
        devices = [d for d in self.plan.mesh.devices.flat if d.process_index == jax.process_index()]
        memory = HostMemory.now() if devices[0].platform == "cpu" else None
        shortfall = (
            None if memory is None else memory.shortfall(report.peak_bytes, len(devices), "the train step")
        )
        if shortfall is None:
            return
        ways = ["lower trainer.global_batch_size or data.seq_len",
                "set trainer.microbatch_size (each step in several passes)"]  # fmt: skip
        if self.config.model.remat != "full":
            ways.append("set model.remat full")
        raise HostMemoryError(
            f"{shortfall}: it would be killed at its first step. To fit, {', '.join(ways)}, or train a "
            "smaller model (--config configs/tiny.yaml); --dry-run plans a config without training it"
        )
