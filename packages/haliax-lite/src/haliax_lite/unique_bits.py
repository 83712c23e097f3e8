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

__all__ = [
    "packbits",
    "unique",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unpackbits",
]


def unique(
    array: NamedArray,
    Unique: Axis,
    *,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: AxisSelector | None = None,
    fill_value=None,
) -> NamedArray | tuple[NamedArray, ...]:
    """The sorted distinct values along ``Unique`` (``jnp.unique`` with ``size=Unique.size``), plus, as asked
    and in this order, first indices, inverse and counts (Haliax's signature).

    With ``axis``, distinct slices along it: the values keep the other axes and ``axis`` becomes ``Unique``;
    the inverse is along ``axis``. Without, the array is flattened; the inverse has the array's axes.

    >>> import haliax_lite as hax
    >>> x = hax.named(jnp.array([[1, 2], [1, 2], [0, 5]]), ("row", "col"))
    >>> rows, inverse = unique(x, hax.Axis("u", 2), axis="row", return_inverse=True)
    >>> rows.axes, rows.array.tolist(), inverse.array.tolist()
    ((Axis(name='u', size=2), Axis(name='col', size=2)), [[0, 5], [1, 2]], [1, 1, 0])
    """
    if not isinstance(Unique, Axis):
        raise TypeError(
            f"unique: Unique must be an Axis giving the number of distinct values, got {Unique!r}"
        )
    position = None if axis is None else array.require_axis_indices(axis)
    out = jnp.unique(
        array.array,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=position,
        size=Unique.size,
        fill_value=fill_value,
    )
    values, indices, inverse, counts = out
    if position is None:
        values = NamedArray(values, (Unique,))
        inverse = NamedArray(inverse.reshape(array.array.shape), array.axes)
    else:
        values = NamedArray(values, array.axes[:position] + (Unique,) + array.axes[position + 1 :])
        inverse = NamedArray(inverse.reshape(-1), (array.axes[position],))
    wanted = (
        (NamedArray(indices, (Unique,)), return_index),
        (inverse, return_inverse),
        (NamedArray(counts, (Unique,)), return_counts),
    )
    extra = [r for r, asked in wanted if asked]
    return (values, *extra) if extra else values


def unique_values(array: NamedArray, Unique: Axis, *, axis: AxisSelector | None = None, fill_value=None):
    """Only the distinct values (see :func:`unique`)."""
    return unique(array, Unique, axis=axis, fill_value=fill_value)


def unique_counts(
    array: NamedArray, Unique: Axis, *, axis: AxisSelector | None = None, fill_value=None
) -> tuple[NamedArray, NamedArray]:
    """The distinct values and how often each occurs (see :func:`unique`)."""
    return unique(array, Unique, return_counts=True, axis=axis, fill_value=fill_value)


def unique_inverse(
    array: NamedArray, Unique: Axis, *, axis: AxisSelector | None = None, fill_value=None
) -> tuple[NamedArray, NamedArray]:
    """The distinct values, and for each entry of ``array`` the position of its value among them.

    >>> import haliax_lite as hax
    >>> values, inverse = hax.unique_inverse(hax.named(jnp.array([3, 1, 3]), "t"), hax.Axis("u", 2))
    >>> inverse.array.tolist()
    [1, 0, 1]
    """
    return unique(array, Unique, return_inverse=True, axis=axis, fill_value=fill_value)


def unique_all(
    array: NamedArray, Unique: Axis, *, axis: AxisSelector | None = None, fill_value=None
) -> tuple[NamedArray, NamedArray, NamedArray, NamedArray]:
    """``(values, first indices, inverse, counts)``, as ``jnp.unique_all`` (see :func:`unique`)."""
    return unique(
        array,
        Unique,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        axis=axis,
        fill_value=fill_value,
    )


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
