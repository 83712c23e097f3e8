"""Session-wide test setup: 8 fake CPU devices, Hypothesis profiles, hardware markers, and doctests.

This file is loaded before any test module, so XLA_FLAGS is in place before JAX is first imported.
"""

import importlib
import os
from pathlib import Path

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


def _source_module(path: Path) -> str | None:
    """The dotted name of a module under some `packages/<name>/src/`, or None for any other file."""
    parts = path.parts
    for i in range(len(parts) - 3, 0, -1):
        if parts[i] == "src" and parts[i - 2] == "packages":
            names = [*parts[i + 1 : -1], path.stem]
            return ".".join(names[:-1] if names[-1] == "__init__" else names)
    return None


def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """A package module whose optional dependency is missing: its doctests are skipped, saying which.

    `--doctest-modules` imports every module under `packages/*/src`; one that imports an optional extra
    (say `ray`, in a trainer installed without it) would otherwise be a collection error. Only a missing
    *other* distribution is skipped this way: any other import error is reported as usual.
    """
    if not isinstance(collector, pytest.File):  # under src/, only --doctest-modules collects files
        return None
    name = _source_module(Path(collector.path))
    if name is None:
        return None
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        own = ".".join(name.split(".")[: 2 if name.startswith("meltemi.") else 1])  # meltemi: a namespace
        if not error.name or error.name == own or error.name.startswith(own + "."):
            return None
        reason = f"Skipped: {name} needs the optional module {error.name!r}, which is not installed"
        return pytest.CollectReport(collector.nodeid, "skipped", (str(collector.path), 0, reason), [])
    return None
