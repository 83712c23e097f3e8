"""More of ``jax.numpy`` by name: comparisons of whole arrays, repeat/tile, searchsorted, bincount,
unique values, nan-aware arg-reductions and left padding.

Functions whose output size depends on the data (``bincount``, ``unique_values``) take the output Axis,
so that shapes stay static under ``jit``.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from ._wrap import NamedOrNumeric, binary_arrays
from .axis import Axis, AxisSelector, axis_name
from .core import NamedArray
from .reductions import arg_reduction, prod

__all__ = [
    "allclose",
    "array_equal",
    "array_equiv",
    "bincount",
    "nanargmax",
    "nanargmin",
    "ndim",
    "pad_left",
    "product",
    "repeat",
    "searchsorted",
    "tile",
]

product = prod


def ndim(a: NamedOrNumeric) -> int:
    """The number of axes (dimensions).

    >>> import haliax_lite as hax
    >>> hax.ndim(hax.zeros((hax.Axis("a", 2), hax.Axis("b", 3))))
    2
    """
    return a.ndim if isinstance(a, NamedArray) else jnp.ndim(a)


def _aligned(a: NamedOrNumeric, b: NamedOrNumeric) -> tuple | None:
    """``a`` and ``b`` broadcast by name, or None when their axes cannot be broadcast together."""
    try:
        return binary_arrays(a, b)[:2]
    except ValueError:
        return None


def allclose(
    a: NamedOrNumeric, b: NamedOrNumeric, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> jax.Array:
    """Whether every pair of entries is close, comparing by axis name (any axis order).

    >>> import haliax_lite as hax
    >>> A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    >>> bool(hax.allclose(hax.arange((A, B)), hax.arange((A, B)).rearrange((B, A))))
    True
    """
    x, y = binary_arrays(a, b)[:2]
    return jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)


def array_equal(a: NamedOrNumeric, b: NamedOrNumeric, equal_nan: bool = False) -> jax.Array:
    """Whether ``a`` and ``b`` have the same axes (in any order) and equal entries.

    >>> import haliax_lite as hax
    >>> bool(hax.array_equal(hax.ones(hax.Axis("a", 2)), hax.ones(hax.Axis("b", 2))))
    False
    """
    if isinstance(a, NamedArray) and isinstance(b, NamedArray) and set(a.axes) != set(b.axes):
        return jnp.asarray(False)
    x, y = binary_arrays(a, b)[:2]
    return jnp.array_equal(x, y, equal_nan=equal_nan)


def array_equiv(a: NamedOrNumeric, b: NamedOrNumeric) -> jax.Array:
    """Whether ``a`` and ``b`` are equal once broadcast by name (False when they cannot be).

    >>> import haliax_lite as hax
    >>> A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    >>> bool(hax.array_equiv(hax.ones((A, B)), hax.ones(B)))
    True
    """
    aligned = _aligned(a, b)
    if aligned is None:
        return jnp.asarray(False)
    return jnp.array_equiv(*aligned)


def nanargmax(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the maximum along ``axis`` ignoring NaNs (of the flattened array when None).

    >>> import haliax_lite as hax
    >>> hax.nanargmax(hax.named(jnp.array([1.0, jnp.nan, 3.0]), "a"), "a").item()
    2
    """
    return arg_reduction(jnp.nanargmax, array, axis)


def nanargmin(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the minimum along ``axis`` ignoring NaNs (of the flattened array when None)."""
    return arg_reduction(jnp.nanargmin, array, axis)


def repeat(
    a: NamedArray, repeats: int, axis: AxisSelector, total_repeat_length: int | None = None
) -> NamedArray:
    """Repeat each entry along ``axis`` ``repeats`` times; the axis grows in place.

    >>> import haliax_lite as hax
    >>> hax.repeat(hax.arange(hax.Axis("a", 2)), 2, "a").array.tolist()
    [0, 0, 1, 1]
    """
    i = a.require_axis_indices(axis)
    out = jnp.repeat(a.array, repeats, axis=i, total_repeat_length=total_repeat_length)
    return NamedArray(out, a.axes[:i] + (a.axes[i].resize(out.shape[i]),) + a.axes[i + 1 :])


def tile(a: NamedArray, reps: Mapping[AxisSelector, int]) -> NamedArray:
    """``a`` repeated as a whole ``reps[axis]`` times along each named axis (which grows in place); a name
    ``a`` lacks adds a new axis of that many repetitions, in front, as in Haliax and ``jnp.tile``.

    >>> import haliax_lite as hax
    >>> hax.tile(hax.arange(hax.Axis("a", 2)), {"a": 2}).array.tolist()
    [0, 1, 0, 1]
    >>> hax.tile(hax.arange(hax.Axis("a", 2)), {"copies": 2}).shape
    {'copies': 2, 'a': 2}
    """
    present = {ax.name for ax in a.axes}
    for key in reps:
        if isinstance(key, Axis) and key.name in present:
            a.require_axis_indices(key)  # a size clash is an error naming the axis
    counts = {axis_name(k): int(n) for k, n in reps.items()}
    bad = {k: n for k, n in counts.items() if n < 0}
    if bad:
        raise ValueError(f"tile: repetitions must be >= 0, got {bad}")
    new = tuple(Axis(name, n) for name, n in counts.items() if name not in present)
    per_dim = tuple(ax.size for ax in new) + tuple(counts.get(ax.name, 1) for ax in a.axes)
    axes = new + tuple(ax.resize(ax.size * counts.get(ax.name, 1)) for ax in a.axes)
    return NamedArray(jnp.tile(a.array, per_dim), axes)


def searchsorted(
    a: NamedArray, v: NamedOrNumeric, *, side: str = "left", sorter=None, method: str = "scan"
) -> NamedOrNumeric:
    """Where each value of ``v`` would go in the 1-axis array ``a`` (sorted, or put in order by the indices
    ``sorter``); the result has ``v``'s axes (a scalar ``v`` gives a 0-d NamedArray, as in Haliax).

    >>> import haliax_lite as hax
    >>> sorted_ = hax.named(jnp.array([1, 3, 5]), "a")
    >>> hax.searchsorted(sorted_, hax.named(jnp.array([0, 4]), "q")).array.tolist()
    [0, 2]
    >>> unsorted = hax.named(jnp.array([5, 1, 3]), "a")
    >>> hax.searchsorted(unsorted, 3, side="right", sorter=hax.named(jnp.array([1, 2, 0]), "a")).item()
    2
    """
    if a.ndim != 1:
        raise ValueError(f"searchsorted needs a sorted array with one axis, got {a.axes}; index it first")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if isinstance(sorter, NamedArray):
        if sorter.axes != a.axes:
            raise ValueError(f"searchsorted: sorter has axes {sorter.axes}, it must have a's axes {a.axes}")
        sorter = sorter.array
    raw = v.array if isinstance(v, NamedArray) else v
    result = jnp.searchsorted(a.array, raw, side=side, sorter=sorter, method=method)
    if isinstance(v, NamedArray):
        return NamedArray(result, v.axes)
    return NamedArray(result, ()) if jnp.ndim(raw) == 0 else result


def bincount(x: NamedArray, Counts: Axis, *, weights: NamedArray | None = None) -> NamedArray:
    """How often each value ``0 .. Counts.size - 1`` occurs in ``x`` (summing ``weights`` if given).

    Values at or beyond ``Counts.size`` are dropped; the size is static so this works under ``jit``.

    >>> import haliax_lite as hax
    >>> hax.bincount(hax.named(jnp.array([0, 2, 2]), "t"), hax.Axis("v", 3)).array.tolist()
    [1, 0, 2]
    """
    raw_weights = None
    if weights is not None:
        raw_weights = (
            weights.rearrange(x.axes) if isinstance(weights, NamedArray) else weights
        ).array.reshape(-1)
    counts = jnp.bincount(x.array.reshape(-1), weights=raw_weights, length=Counts.size)
    return NamedArray(counts, (Counts,))


def pad_left(array: NamedArray, axis: AxisSelector, new_axis: Axis, value=0) -> NamedArray:
    """``array`` padded with ``value`` at the start of ``axis`` up to ``new_axis``'s size (renamed to it).

    >>> import haliax_lite as hax
    >>> hax.pad_left(hax.ones(hax.Axis("p", 2)), "p", hax.Axis("p", 4)).array.tolist()
    [0.0, 0.0, 1.0, 1.0]
    """
    i = array.require_axis_indices(axis)
    extra = new_axis.size - array.axes[i].size
    if extra < 0:
        raise ValueError(
            f"pad_left: {new_axis} is smaller than {array.axes[i]}; use slicing to shorten an axis"
        )
    widths = [(0, 0)] * array.ndim
    widths[i] = (extra, 0)
    padded = jnp.pad(array.array, widths, constant_values=value)
    return NamedArray(padded, array.axes[:i] + (new_axis,) + array.axes[i + 1 :])
