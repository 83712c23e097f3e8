"""The memory per device a plan must fit in: ``hardware.memory_gib`` when set, else the chip's, else none
(no verdict), with where the figure came from; one rule for every dry run (training, evaluation, sampling).
Also how such a plan differs when a CPU compiled it (``planned_attention``, ``cpu_plan_notes``).

>>> from meltemi.trainer.config import HardwareConfig, RunConfig
>>> budget = MemoryBudget.of(HardwareConfig(chip="TPU v5e"))
>>> budget.limit, budget.verdict(17 * 2**30)
('16 GiB per TPU v5e', 'against 16 GiB per TPU v5e: does NOT fit: 1.00 GiB over')
"""

from __future__ import annotations

import dataclasses

import jax

from meltemi.trainer.chips import Chip, chip_named
from meltemi.trainer.config import GPU_ONLY_ATTENTION, HardwareConfig, RunConfig

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """``chip`` (None when unset), the ``device_memory`` in bytes a plan is checked against (None: no
    check), and whether that figure was ``given`` (``hardware.memory_gib``) rather than the chip's."""

    chip: Chip | None
    device_memory: int | None
    given: bool = False

    @staticmethod
    def of(hardware: HardwareConfig) -> MemoryBudget:
        chip = chip_named(hardware.chip) if hardware.chip is not None else None
        memory_gib = hardware.memory_gib or (chip.memory_gib if chip else None)
        memory = None if memory_gib is None else int(memory_gib * GIB)
        return MemoryBudget(chip, memory, hardware.memory_gib is not None)

    def fits(self, peak_bytes: int) -> bool:
        return self.device_memory is None or peak_bytes <= self.device_memory

    @property
    def limit(self) -> str:
        """The memory per device, saying where it came from: ``32 GiB per TPU v4``, or ``40 GiB per device
        (hardware.memory_gib)``."""
        where = "device (hardware.memory_gib)" if self.given else self.chip.name
        return f"{self.device_memory / GIB:.3g} GiB per {where}"

    def verdict(self, peak_bytes: int) -> str:
        """One line: whether ``peak_bytes`` fits, and by how much it does not."""
        if self.device_memory is None:
            return "no memory verdict: set hardware.chip or hardware.memory_gib"
        over = (peak_bytes - self.device_memory) / GIB
        return f"against {self.limit}: " + (
            "fits" if self.fits(peak_bytes) else f"does NOT fit: {over:.2f} GiB over"
        )

    def shortfall(self, peak_bytes: int) -> str:
        """The error line of a plan that does not fit."""
        over = (peak_bytes - self.device_memory) / GIB
        return f"the plan needs {over:.2f} GiB more per device than it has: {self.limit}"


HALF_PRECISION = ("bfloat16", "float16")


def _on_cpu(mesh: jax.sharding.Mesh) -> bool:
    return mesh.devices.flat[0].platform == "cpu"


def planned_attention(config: RunConfig, mesh: jax.sharding.Mesh) -> RunConfig:
    """The config a dry run compiles on ``mesh``: ``config``, except that on a CPU an attention kernel that
    compiles only for a GPU (``mosaic``, ``cudnn``) is planned as ``xla``, flash attention in plain JAX,
    whose memory is linear in the sequence as theirs is (``cpu_plan_notes`` says so).

    >>> cpu = jax.make_mesh((1,), ("data",))
    >>> planned_attention(RunConfig(model={"attention": "mosaic"}), cpu).model.attention
    'xla'
    """
    if config.model.attention not in GPU_ONLY_ATTENTION or not _on_cpu(mesh):
        return config
    return config.model_copy(update={"model": config.model.model_copy(update={"attention": "xla"})})


def cpu_plan_notes(budget: MemoryBudget, config: RunConfig, mesh: jax.sharding.Mesh) -> tuple[str, ...]:
    """How a plan of ``config`` compiled by XLA's CPU compiler on ``mesh`` differs from the accelerator's
    (nothing on another platform):

    - computing in 16-bit floats against a device's memory, it overstates the temporaries: the CPU compiler
      computes bfloat16 and float16 matmuls in float32, holding their operands and results in float32, where
      a GPU or TPU keeps them in 16 bits. The shipped 1B config's step planned here at about twice the
      temporaries an H200 needed (benchmarks/RESULTS.md, 2026-11-27). The verdict stays the CPU plan's: the
      note says which way it errs.
    - a GPU-only attention kernel was planned as ``xla`` (``planned_attention``).

    >>> from meltemi.trainer.config import HardwareConfig
    >>> h100, cpu = MemoryBudget.of(HardwareConfig(chip="H100")), jax.make_mesh((1,), ("data",))
    >>> cpu_plan_notes(h100, RunConfig(trainer={"compute_dtype": "float32"}), cpu)
    ()
    >>> for note in cpu_plan_notes(h100, RunConfig(model={"attention": "mosaic"}), cpu):
    ...     print(note)
    XLA's CPU compiler holds bfloat16 matmul operands and results in float32, so this plan overstates the temporaries a GPU or TPU needs (the 1B config's step: about twice an H200's, benchmarks/RESULTS.md)
    model.attention mosaic compiles only for a GPU: attention is planned here as xla (flash attention in plain JAX, its memory linear in the sequence as the kernel's)
    """  # noqa: E501
    if not _on_cpu(mesh):
        return ()
    notes = []
    dtype, kernel = config.trainer.compute_dtype, config.model.attention
    if budget.device_memory is not None and dtype in HALF_PRECISION:
        notes.append(
            f"XLA's CPU compiler holds {dtype} matmul operands and results in float32, so this plan "
            "overstates the temporaries a GPU or TPU needs (the 1B config's step: about twice an H200's, "
            "benchmarks/RESULTS.md)"
        )
    if kernel in GPU_ONLY_ATTENTION:
        notes.append(
            f"model.attention {kernel} compiles only for a GPU: attention is planned here as xla (flash "
            "attention in plain JAX, its memory linear in the sequence as the kernel's)"
        )
    return tuple(notes)
