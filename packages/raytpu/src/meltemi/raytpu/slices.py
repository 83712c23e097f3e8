"""Slice types: what one slice of an accelerator is made of, and how Ray names its resources.

A slice is the unit a cloud gives and takes away: a TPU pod slice (several hosts wired together), one GPU
node, or, for tests, a "fake slice" of CPU-only hosts. Every host of a TPU slice carries the Ray node labels
``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id`` and ``ray.io/tpu-pod-type``, and its worker 0 carries
the head resource ``TPU-<type>-head``; fake CPU slices carry the same labels and a ``cpu-<hosts>-head``
resource, so one claiming mechanism serves both.

>>> slice_type("v5litepod-256").hosts, slice_type("v4-16").chips_per_host
(64, 4)
>>> slice_type("v5e-16").head_resource
'TPU-v5litepod-16-head'
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

SliceKind = Literal["tpu", "gpu", "cpu"]


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    """How one TPU generation counts its sizes and spreads its chips over hosts."""

    name: str
    cores_per_chip_in_name: int
    chips_per_host: int
    single_host_chips: tuple[int, ...]
    sizes: tuple[int, ...]


def _powers_of_two(low: int, high: int) -> tuple[int, ...]:
    return tuple(2**k for k in range(low.bit_length() - 1, high.bit_length()))


# v4 and v5p names count TensorCores (two per chip); v5e and v6e names count chips, and up to eight chips
# fit on one host, while their multi-host slices are made of four-chip hosts.
TPU_GENERATIONS: dict[str, TpuGeneration] = {
    "v4": TpuGeneration("v4", 2, 4, (4,), _powers_of_two(8, 4096)),
    "v5p": TpuGeneration("v5p", 2, 4, (4,), _powers_of_two(8, 8192)),
    "v5litepod": TpuGeneration("v5litepod", 1, 4, (1, 4, 8), (1, 4, 8, 16, 32, 64, 128, 256)),
    "v6e": TpuGeneration("v6e", 1, 4, (1, 4, 8), (1, 4, 8, 16, 32, 64, 128, 256)),
}
_ALIASES = {"v5e": "v5litepod"}

SLICE_NAME_LABEL = "ray.io/tpu-slice-name"
WORKER_ID_LABEL = "ray.io/tpu-worker-id"
POD_TYPE_LABEL = "ray.io/tpu-pod-type"
NODE_ID_LABEL = "ray.io/node-id"


@dataclasses.dataclass(frozen=True)
class SliceType:
    """One kind of slice: how many hosts, how many chips each, and the Ray resources that name them.

    ``resource`` is what one host's task reserves (``chips_per_host`` of it); ``head_resource``, when set,
    exists once per slice, on worker 0, and claiming it claims the slice.
    """

    name: str
    kind: SliceKind
    hosts: int
    chips_per_host: int
    resource: str
    head_resource: str | None

    @property
    def chips(self) -> int:
        return self.hosts * self.chips_per_host

    def __str__(self) -> str:
        return self.name


def tpu_slice(generation: str, size: int) -> SliceType:
    """The slice type of a TPU pod slice, e.g. ``tpu_slice("v5litepod", 256)`` for 64 hosts of 4 chips.

    >>> tpu_slice("v4", 32).hosts
    4
    """
    key = _ALIASES.get(generation, generation)
    if key not in TPU_GENERATIONS:
        known = ", ".join(sorted([*TPU_GENERATIONS, *_ALIASES]))
        raise ValueError(f"unknown TPU generation {generation!r}; known generations: {known}")
    gen = TPU_GENERATIONS[key]
    if size not in gen.sizes:
        raise ValueError(f"{key}-{size} is not a TPU slice size; {key} sizes are {list(gen.sizes)}")
    chips = size // gen.cores_per_chip_in_name
    if chips in gen.single_host_chips:
        hosts, per_host = 1, chips
    else:
        hosts, per_host = chips // gen.chips_per_host, gen.chips_per_host
    name = f"{key}-{size}"
    return SliceType(name, "tpu", hosts, per_host, "TPU", f"TPU-{name}-head")


def gpu_slice(gpus_per_host: int) -> SliceType:
    """A GPU node as a one-host slice of ``gpus_per_host`` GPUs.

    >>> gpu_slice(8).name
    'gpu-8'
    """
    _check_positive("gpus_per_host", gpus_per_host)
    return SliceType(f"gpu-{gpus_per_host}", "gpu", 1, gpus_per_host, "GPU", None)


def cpu_slice(hosts: int) -> SliceType:
    """A fake slice of ``hosts`` CPU-only hosts (one CPU each), shaped like a TPU slice, for tests.

    >>> cpu_slice(2).head_resource
    'cpu-2-head'
    """
    _check_positive("hosts", hosts)
    name = f"cpu-{hosts}"
    return SliceType(name, "cpu", hosts, 1, "CPU", f"{name}-head")


_NAME = re.compile(r"^([a-z0-9]+)-(\d+)$")


def slice_type(spec: str | SliceType) -> SliceType:
    """Parse a slice type name: ``v4-16``, ``v5p-128``, ``v5litepod-256`` (or ``v5e-256``), ``v6e-8``,
    ``gpu-8`` (one host with 8 GPUs) or ``cpu-2`` (a fake slice of 2 CPU hosts).

    >>> slice_type("v6e-64").hosts
    16
    """
    if isinstance(spec, SliceType):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"slice_type must be a name like 'v4-16' or a SliceType, got {type(spec).__name__}")
    match = _NAME.match(spec.strip().lower())
    if match is None:
        raise ValueError(f"slice type {spec!r} is not of the form '<generation>-<size>', e.g. 'v5litepod-16'")
    prefix, size = match.group(1), int(match.group(2))
    if prefix == "gpu":
        return gpu_slice(size)
    if prefix == "cpu":
        return cpu_slice(size)
    return tpu_slice(prefix, size)


def _check_positive(what: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
