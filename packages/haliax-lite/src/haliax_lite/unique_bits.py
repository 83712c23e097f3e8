"""Distinct values and bit packing along named axes (``jnp.unique_*``, ``jnp.packbits``/``unpackbits``).

Sizes that depend on the data are fixed by an output Axis (``Unique``), so the functions work under
``jit``: missing distinct values are ``fill_value`` (default: the smallest value) with a count of 0.

>>> import haliax_lite as hax
>>> x = hax.named(jnp.array([3, 1, 3]), "t")
>>> values, counts = hax.unique_counts(x, hax.Axis("u", 2))
>>> values.array.tolist(), counts.array.tolist()
([1, 3], [1, 2])
"""

from __future__ import annotations

import jax.numpy as jnp

from .axis import Axis, AxisSelector
from .core import NamedArray

__all__ = ["packbits", "unique", "unique_all", "unique_counts", "unique_inverse", "unpackbits"]


def unique_counts(array: NamedArray, Unique: Axis, *, fill_value=None) -> tuple[NamedArray, NamedArray]:
    """The sorted distinct values of ``array`` along ``Unique`` and how often each occurs."""
    values, counts = jnp.unique_counts(array.array, size=Unique.size, fill_value=fill_value)
    return NamedArray(values, (Unique,)), NamedArray(counts, (Unique,))


def unique_inverse(array: NamedArray, Unique: Axis, *, fill_value=None) -> tuple[NamedArray, NamedArray]:
    """The sorted distinct values along ``Unique``, and for each entry of ``array`` (same axes) the
    position of its value among them.

    >>> import haliax_lite as hax
    >>> values, inverse = hax.unique_inverse(hax.named(jnp.array([3, 1, 3]), "t"), hax.Axis("u", 2))
    >>> inverse.array.tolist()
    [1, 0, 1]
    """
    values, inverse = jnp.unique_inverse(array.array, size=Unique.size, fill_value=fill_value)
    return NamedArray(values, (Unique,)), NamedArray(inverse.reshape(array.array.shape), array.axes)


def unique_all(
    array: NamedArray, Unique: Axis, *, fill_value=None
) -> tuple[NamedArray, NamedArray, NamedArray, NamedArray]:
    """``(values, first indices into the flattened array, inverse, counts)``, as ``jnp.unique_all``."""
    values, indices, inverse, counts = jnp.unique_all(array.array, size=Unique.size, fill_value=fill_value)
    return (
        NamedArray(values, (Unique,)),
        NamedArray(indices, (Unique,)),
        NamedArray(inverse.reshape(array.array.shape), array.axes),
        NamedArray(counts, (Unique,)),
    )


def unique(
    array: NamedArray,
    Unique: Axis,
    *,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    fill_value=None,
) -> NamedArray | tuple[NamedArray, ...]:
    """The sorted distinct values along ``Unique``, plus (as asked) first indices, inverse and counts."""
    values, indices, inverse, counts = unique_all(array, Unique, fill_value=fill_value)
    extra = [
        r
        for r, wanted in ((indices, return_index), (inverse, return_inverse), (counts, return_counts))
        if wanted
    ]
    return (values, *extra) if extra else values


def packbits(a: NamedArray, axis: AxisSelector, bitorder: str = "big") -> NamedArray:
    """Pack the booleans (or 0/1 integers) along ``axis`` into uint8, eight per entry; the axis shrinks.

    >>> import haliax_lite as hax
    >>> hax.packbits(hax.named(jnp.array([1, 0, 1]), "b"), "b").array.tolist()
    [160]
    """
    i = a.require_axis_indices(axis)
    out = jnp.packbits(a.array, axis=i, bitorder=bitorder)
    return NamedArray(out, a.axes[:i] + (a.axes[i].resize(out.shape[i]),) + a.axes[i + 1 :])


def unpackbits(
    a: NamedArray, axis: AxisSelector, count: int | None = None, bitorder: str = "big"
) -> NamedArray:
    """Unpack uint8 entries along ``axis`` into bits (``count`` of them if given); the axis grows."""
    i = a.require_axis_indices(axis)
    out = jnp.unpackbits(a.array, axis=i, count=count, bitorder=bitorder)
    return NamedArray(out, a.axes[:i] + (a.axes[i].resize(out.shape[i]),) + a.axes[i + 1 :])
