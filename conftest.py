"""Session-wide test setup: 8 fake CPU devices, Hypothesis profiles, and hardware markers.

This file is loaded before any test module, so XLA_FLAGS is in place before JAX is first imported.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

_FAKE_DEVICES = "--xla_force_host_platform_device_count=8"
if _FAKE_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAKE_DEVICES}".strip()

# JAX compiles on first use, so wall-clock deadlines would only measure compilation: none.
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile(
    "ci", max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_HARDWARE_MARKERS = ("gpu", "tpu")


def _available_accelerators() -> set[str]:
    try:
        import jax
    except ImportError:
        return set()
    found = set()
    for platform in _HARDWARE_MARKERS:
        try:
            if jax.devices(platform):
                found.add(platform)
        except RuntimeError:
            pass
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = {m for item in items for m in _HARDWARE_MARKERS if item.get_closest_marker(m)}
    if not wanted:
        return
    available = _available_accelerators()
    for item in items:
        for marker in _HARDWARE_MARKERS:
            if item.get_closest_marker(marker) and marker not in available:
                item.add_marker(pytest.mark.skip(reason=f"needs a {marker.upper()}; none is attached"))
