"""Pooling over named window axes (Haliax's ``max_pool``, ``mean_pool``, ``min_pool``).

``Window`` names the pooled axes and gives each its window size, e.g. ``(Height.resize(2), Width.resize(2))``
or ``{"height": 2, "width": 2}``; other axes (batch, channels) are untouched. The pooled axes keep their
names and shrink to the number of windows.

>>> import haliax_lite as hax
>>> x = hax.arange(hax.Axis("t", 4), dtype=float)
>>> hax.nn.max_pool({"t": 2}, x, stride=2).array.tolist()
[1.0, 3.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from haliax_lite import _namespace as hax

__all__ = ["max_pool", "mean_pool", "min_pool"]

Padding = str | Sequence[tuple[int, int]]


def _pool(
    init,
    op,
    Window: hax.AxisSpec,
    inputs: hax.NamedArray,
    stride: int | Sequence[int] | None,
    padding: Padding,
) -> hax.NamedArray:
    window = hax.ensure_tuple(Window)
    strides_given = (stride,) * len(window) if isinstance(stride, int) else stride or (1,) * len(window)
    if len(strides_given) != len(window):
        raise ValueError(f"pool: {len(strides_given)} strides for the {len(window)} window axes {window}")
    dims, strides = [1] * inputs.ndim, [1] * inputs.ndim
    for ax, s in zip(window, strides_given, strict=True):
        i = inputs.require_axis_indices(ax.name)
        dims[i], strides[i] = ax.size, s
    if not isinstance(padding, str):
        pads = [(0, 0)] * inputs.ndim
        for ax, pad in zip(window, padding, strict=True):
            pads[inputs.require_axis_indices(ax.name)] = tuple(pad)
        padding = pads
    out = jax.lax.reduce_window(inputs.array, init(inputs.dtype), op, dims, strides, padding)
    axes = tuple(a.resize(n) for a, n in zip(inputs.axes, out.shape, strict=True))
    return hax.NamedArray(out, axes)


def _lowest(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _highest(dtype):
    return jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max


def max_pool(
    Window: hax.AxisSpec,
    inputs: hax.NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> hax.NamedArray:
    """The maximum over each window (``stride`` defaults to 1; ``padding`` is ``"VALID"``, ``"SAME"`` or
    one ``(low, high)`` pair per window axis)."""
    return _pool(lambda d: jnp.asarray(_lowest(d), d), jax.lax.max, Window, inputs, stride, padding)


def min_pool(
    Window: hax.AxisSpec,
    inputs: hax.NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> hax.NamedArray:
    """The minimum over each window (see :func:`max_pool`)."""
    return _pool(lambda d: jnp.asarray(_highest(d), d), jax.lax.min, Window, inputs, stride, padding)


def mean_pool(
    Window: hax.AxisSpec,
    inputs: hax.NamedArray,
    stride: int | Sequence[int] | None = None,
    padding: Padding = "VALID",
    *,
    count_include_pad: bool = False,
) -> hax.NamedArray:
    """The mean over each window; with padding, padded entries count only if ``count_include_pad``."""
    total = _pool(lambda d: jnp.asarray(0, d), jax.lax.add, Window, inputs, stride, padding)
    if count_include_pad:
        return total / hax.axis_size(hax.ensure_tuple(Window))
    ones = hax.NamedArray(jnp.ones_like(inputs.array), inputs.axes)
    counts = _pool(lambda d: jnp.asarray(0, d), jax.lax.add, Window, ones, stride, padding)
    return total / counts
