"""The devices a dry run plans on: as many fake CPU devices as the target has, made before JAX starts.

The count is ``--devices``, else ``hardware.devices``, else the mesh's size when no axis is -1, else one
device (the mesh's -1 axis takes it: a run on one GPU, or on this CPU). This module imports JAX only inside
:func:`planning_devices`, after it has set the fake device count.

>>> from meltemi.trainer.config import RunConfig
>>> target_devices(RunConfig(hardware={"devices": 16}), None).count, target_devices(RunConfig(), 4).count
(16, 4)
>>> print(target_devices(RunConfig(), None).reason)
one device: no --devices, hardware.devices or mesh without -1 says more
"""

from __future__ import annotations

import dataclasses
import os

from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import TrainerError


@dataclasses.dataclass(frozen=True)
class TargetDevices:
    """How many devices a dry run plans for, why that many, and whether nothing named one (``assumed``)."""

    count: int
    reason: str
    assumed: bool = False

    @property
    def note(self) -> str | None:
        """The line a dry run says when nothing named the count (None otherwise)."""
        return f"planning for {self.reason} (--devices N plans for N)" if self.assumed else None


def target_devices(config: RunConfig, devices: int | None) -> TargetDevices:
    """How many devices to plan for: ``devices`` (a flag), ``hardware.devices``, a fixed mesh's size, else
    one."""
    mesh = config.trainer.mesh
    sizes = (mesh.replica, mesh.data, mesh.model)
    if devices:
        return TargetDevices(devices, "--devices")
    if config.hardware.devices:
        return TargetDevices(config.hardware.devices, "hardware.devices")
    if min(sizes) > 0:
        return TargetDevices(sizes[0] * sizes[1] * sizes[2], "the mesh's size")
    return TargetDevices(1, "one device: no --devices, hardware.devices or mesh without -1 says more", True)


def planning_devices(count: int) -> list:
    """``count`` fake CPU devices (``jax.Device``) to lower and compile on; a ``TrainerError`` when JAX
    had already started in this process with fewer."""
    from meltemi.trainer.step.fake_devices import with_fake_devices

    os.environ["XLA_FLAGS"] = with_fake_devices(count)
    import jax

    jax.config.update("jax_platforms", "cpu")
    if len(jax.devices()) < count:  # JAX started before the devices could be faked
        raise TrainerError(
            f"--dry-run for {count} devices: this process has {len(jax.devices())}; run it alone"
        )
    return jax.devices()[:count]
