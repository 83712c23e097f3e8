"""What the two Pallas kernels share: tile-size checks and rounding, and how a kernel is launched.

Triton tiles are powers of two of at least ``MIN_TILE``; off a GPU the kernels run interpreted.
"""

from __future__ import annotations

import dataclasses

import jax
from jax.experimental import pallas as pl

from meltemi.kernels.errors import BadTilingError

MIN_TILE = 16
"""Triton's smallest matrix-multiply tile side."""


def check_launch_settings(owner: str, num_warps: int | None, num_stages: int | None, **tiles: int) -> None:
    """Raise a ``BadTilingError`` naming ``owner`` and the field unless every tile is a power of two >= 16.

    >>> check_launch_settings("Config", 4, 2, block=48)
    Traceback (most recent call last):
    ...
    meltemi.kernels.errors.BadTilingError: Config: block must be a power of two >= 16, got 48
    """
    for name, size in tiles.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < MIN_TILE or size & (size - 1):
            raise BadTilingError(f"{owner}: {name} must be a power of two >= {MIN_TILE}, got {size!r}")
    warps_ok = num_warps is None or (
        isinstance(num_warps, int) and num_warps >= 1 and not num_warps & (num_warps - 1)
    )
    if not warps_ok:
        raise BadTilingError(f"{owner}: num_warps must be a power of two >= 1 or None, got {num_warps!r}")
    if num_stages is not None and (not isinstance(num_stages, int) or num_stages < 1):
        raise BadTilingError(f"{owner}: num_stages must be a positive int or None, got {num_stages!r}")


def fit_tile(requested: int, extent: int) -> int:
    """The requested tile side, shrunk for a small extent (but never below ``MIN_TILE``)."""
    return max(MIN_TILE, min(requested, pl.next_power_of_2(extent)))


@dataclasses.dataclass(frozen=True)
class Launcher:
    """How one call's kernels run: Triton's warps and pipeline stages, or interpreted."""

    num_warps: int
    num_stages: int
    interpret: bool

    @classmethod
    def resolve(cls, num_warps: int, num_stages: int, interpret: bool | None) -> Launcher:
        """``interpret=None`` interprets unless JAX's default backend is a GPU."""
        return cls(num_warps, num_stages, jax.default_backend() != "gpu" if interpret is None else interpret)

    def __call__(self, kernel, **kwargs):
        """``pl.pallas_call(kernel, **kwargs)`` with these settings."""
        # Imported here, not with the package: Triton's lowering takes a sixth of a second to import, which
        # every program that never launches a Pallas kernel (a CPU run, --help) would pay at start-up.
        from jax.experimental.pallas import triton as pltriton

        return pl.pallas_call(
            kernel,
            interpret=self.interpret,
            compiler_params=pltriton.CompilerParams(num_warps=self.num_warps, num_stages=self.num_stages),
            **kwargs,
        )
