"""Fake CPU devices: the XLA flag that makes one CPU look like ``count`` devices, set without touching the
other flags a user or a test suite already put in ``XLA_FLAGS``.

The dry run fakes the target's devices, a fake CPU slice fakes each host's, and tests start trainers with as
many as their mesh needs. JAX reads the flag once, when it starts, so it must be set before JAX is imported.

>>> with_fake_devices(4, "--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=8")
'--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=4'
>>> with_fake_devices(2, "")
'--xla_force_host_platform_device_count=2'
"""

from __future__ import annotations

import os

_FLAG = "--xla_force_host_platform_device_count"


def with_fake_devices(count: int, flags: str | None = None) -> str:
    """``flags`` (default: this process's ``XLA_FLAGS``) with the fake device count set to ``count``."""
    if count < 1:
        raise ValueError(f"a fake device count must be at least 1, got {count}")
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    kept = [f for f in flags.split() if not f.startswith(_FLAG)]
    return " ".join([*kept, f"{_FLAG}={count}"])


def fake_devices_environ(count: int) -> dict[str, str]:
    """A copy of this process's environment for a child process that should see ``count`` CPU devices.

    >>> fake_devices_environ(3)["XLA_FLAGS"].endswith("--xla_force_host_platform_device_count=3")
    True
    """
    return {**os.environ, "XLA_FLAGS": with_fake_devices(count)}
