"""The accelerators a run can be planned for: an exact, listed set, with each chip's memory and peak.

``hardware.chip`` names one of :data:`CHIPS` exactly (an unknown or partial name is an error listing them);
the dry run checks the plan against its memory (``hardware.memory_gib`` overrides it) and turns MFU into a
step time with its peak. The figures are the vendors' spec sheets, per device as JAX counts devices (one
per chip on TPU v4 and later, which fuse their TensorCores; one per GPU). Vendors state memory in GB of
HBM, which is the binary size of the stacks (an "80 GB" H100 shows 80 GiB to CUDA, less its reserve), so
the figure is kept as GiB.

>>> chip_named("TPU v4").memory_gib, chip_named("TPU v4").peak_bf16_tflops
(32, 275)
>>> chip_named("A100-40")
Traceback (most recent call last):
...
meltemi.trainer.errors.ConfigError: hardware.chip: unknown chip 'A100-40' (did you mean 'A100-40GB'?); ...
>>> chip_of_device_kind("NVIDIA H100 80GB HBM3").name
'H100'
"""

from __future__ import annotations

import dataclasses
import difflib

from meltemi.trainer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Chip:
    """One accelerator: its name in configs, HBM per device, dense bf16 peak, and JAX's names for it."""

    name: str
    memory_gib: float
    peak_bf16_tflops: float
    device_kinds: tuple[str, ...]  # ``jax.Device.device_kind`` values that are this chip
    source: str  # where the figures come from

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def peak_bf16_flops(self) -> float:
        return self.peak_bf16_tflops * 1e12


_GOOGLE = "Google Cloud TPU documentation, system architecture table"
_NVIDIA = "NVIDIA data sheet, SXM form factor, dense (no sparsity)"

CHIPS: dict[str, Chip] = {
    chip.name: chip
    for chip in (
        Chip("TPU v3", 16, 61.5, ("TPU v3",), _GOOGLE + " (per TensorCore: a v3 chip is two devices)"),
        Chip("TPU v4", 32, 275, ("TPU v4",), _GOOGLE),
        Chip("TPU v5e", 16, 197, ("TPU v5 lite", "TPU v5e"), _GOOGLE),
        Chip("TPU v5p", 95, 459, ("TPU v5", "TPU v5p"), _GOOGLE),
        Chip("TPU v6e", 32, 918, ("TPU v6 lite", "TPU v6e"), _GOOGLE + " (Trillium)"),
        Chip("A100-40GB", 40, 312, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"), _NVIDIA),
        Chip("A100-80GB", 80, 312, ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"), _NVIDIA),
        Chip("H100", 80, 989, ("NVIDIA H100 80GB HBM3",), _NVIDIA),
        Chip("H200", 141, 989, ("NVIDIA H200",), _NVIDIA),
        Chip("GH200", 96, 989, ("NVIDIA GH200 480GB",), _NVIDIA + " (the 96 GB HBM3 module)"),
        Chip("B200", 180, 2250, ("NVIDIA B200",), _NVIDIA + " (HGX B200)"),
        Chip("L40S", 48, 362, ("NVIDIA L40S",), _NVIDIA.replace("SXM form factor", "PCIe card")),
        Chip("L4", 24, 121, ("NVIDIA L4",), _NVIDIA.replace("SXM form factor", "PCIe card")),
        Chip("A10G", 24, 70, ("NVIDIA A10G",), "AWS EC2 G5 documentation"),
    )
}


# The chips whose matrix units multiply fp8 (NVIDIA Hopper, Ada and Blackwell): ``model.matmul_dtype: fp8``
# planned for another chip is a config error, since there it would only be emulated.
FP8_CHIPS = frozenset({"H100", "H200", "GH200", "B200", "L40S", "L4"})

# The chips with Hopper's warpgroup matrix multiply (wgmma), which ``model.attention: mosaic`` is written for.
HOPPER_CHIPS = frozenset({"H100", "H200", "GH200"})


def chip_named(name: str) -> Chip:
    """The chip ``hardware.chip`` names: exactly one of :data:`CHIPS`, or a ``ConfigError`` listing them."""
    chip = CHIPS.get(name)
    if chip is None:
        raise ConfigError(f"hardware.chip: {unknown_chip(name)}")
    return chip


def unknown_chip(name: str) -> str:
    """What is wrong with a chip name that is not in :data:`CHIPS`, and the names that are."""
    close = difflib.get_close_matches(name, CHIPS, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = ", ".join(repr(n) for n in CHIPS)
    return (
        f"unknown chip {name!r}{hint}; known chips: {known} "
        "(for another chip, leave hardware.chip unset and set hardware.memory_gib)"
    )


def chip_of_device_kind(device_kind: str) -> Chip | None:
    """The chip a JAX device reports itself as (``device.device_kind``), or None (a CPU, an unlisted GPU)."""
    return next((chip for chip in CHIPS.values() if device_kind in chip.device_kinds), None)
