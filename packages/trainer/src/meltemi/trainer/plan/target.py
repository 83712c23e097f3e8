"""The devices a dry run plans on: as many fake CPU devices as the target has, made before JAX starts.

The count is ``--devices``, else ``hardware.devices``, else the mesh's size when no axis is -1. This module
imports JAX only inside :func:`planning_devices`, after it has set the fake device count.

>>> from meltemi.trainer.config import RunConfig
>>> target_device_count(RunConfig(hardware={"devices": 16}), None), target_device_count(RunConfig(), 4)
(16, 4)
"""

from __future__ import annotations

import os

from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import TrainerError


def target_device_count(config: RunConfig, devices: int | None) -> int:
    """How many devices to plan for: ``devices`` (a flag), ``hardware.devices``, or a fixed mesh's size;
    a ``TrainerError`` saying how to give one when none is known."""
    mesh = config.trainer.mesh
    sizes = (mesh.replica, mesh.data, mesh.model)
    fixed = sizes[0] * sizes[1] * sizes[2] if min(sizes) > 0 else None
    count = devices or config.hardware.devices or fixed
    if not count:
        raise TrainerError(
            "--dry-run needs a device count: --devices N, hardware.devices, or a mesh without -1"
        )
    return count


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
