"""How a positional ``jax.numpy`` function is applied to NamedArrays: the one place the wrappers share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import jax

from .broadcast import aligned_raw, broadcast_axes
from .core import NamedArray

NamedOrNumeric: TypeAlias = NamedArray | jax.Array | complex | bool
"""A NamedArray, or what ``jax.numpy`` takes (a scalar or a positional array)."""


def unary(fn: Callable[..., Any], a: NamedOrNumeric, **kwargs) -> NamedOrNumeric:
    """``fn`` on ``a``'s values, keeping its axes (just ``fn`` when ``a`` is not named)."""
    if isinstance(a, NamedArray):
        return NamedArray(fn(a.array, **kwargs), a.axes)
    return fn(a, **kwargs)


def binary_arrays(a, b):
    """Raw arrays of ``a`` and ``b`` aligned by name (size-1 dimensions where one lacks an axis, see
    ``aligned_raw``), and the result's axes (None if neither is named)."""
    a_named, b_named = isinstance(a, NamedArray), isinstance(b, NamedArray)
    if a_named and b_named:
        if a.axes == b.axes:
            return a.array, b.array, a.axes
        axes = broadcast_axes(a.axes, b.axes)
        return aligned_raw(a, axes), aligned_raw(b, axes), axes
    if a_named:
        return a.array, b, a.axes
    if b_named:
        return a, b.array, b.axes
    return a, b, None


def wrap(raw, axes) -> NamedOrNumeric:
    """``raw`` named by ``axes``, or ``raw`` itself when ``axes`` is None."""
    return raw if axes is None else NamedArray(raw, axes)


def binary(fn: Callable[..., Any], a: NamedOrNumeric, b: NamedOrNumeric, **kwargs) -> NamedOrNumeric:
    """``fn(a, b)`` with ``a`` and ``b`` broadcast by axis name."""
    x, y, axes = binary_arrays(a, b)
    return wrap(fn(x, y, **kwargs), axes)
