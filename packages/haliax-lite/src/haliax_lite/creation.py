"""Creating NamedArrays: filled, like another, ranges, and stacking or concatenating along an axis."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp

from .axis import Axis, AxisSelector, AxisSpec, axis_name, sized_axes
from .broadcast import check_sizes_agree
from .core import NamedArray

__all__ = (
    "arange concatenate full full_like geomspace linspace logspace ones ones_like stack zeros zeros_like"
).split()


def full(shape: AxisSpec, fill_value, dtype=None) -> NamedArray:
    """An array of ``shape`` filled with ``fill_value`` (a scalar or a NamedArray broadcast by name).

    >>> full(Axis("a", 2), 7).array.tolist()
    [7, 7]
    """
    axes = sized_axes(shape, "Creating an array")
    if isinstance(fill_value, NamedArray):
        from .broadcast import broadcast_to

        return broadcast_to(fill_value, axes).astype(dtype or fill_value.dtype)
    return NamedArray(jnp.full(tuple(a.size for a in axes), fill_value, dtype=dtype), axes)


def zeros(shape: AxisSpec, dtype=None) -> NamedArray:
    """Zeros of the given axes: ``hax.zeros((Batch, Embed))``."""
    return full(shape, 0, dtype=dtype or jnp.float32)


def ones(shape: AxisSpec, dtype=None) -> NamedArray:
    """Ones of the given axes: ``hax.ones((Batch, Embed))``."""
    return full(shape, 1, dtype=dtype or jnp.float32)


def full_like(a: NamedArray, fill_value, dtype=None) -> NamedArray:
    """An array with ``a``'s axes (and dtype, unless given) filled with ``fill_value``."""
    return NamedArray(jnp.full_like(a.array, fill_value, dtype=dtype), a.axes)


def zeros_like(a: NamedArray, dtype=None) -> NamedArray:
    return full_like(a, 0, dtype)


def ones_like(a: NamedArray, dtype=None) -> NamedArray:
    return full_like(a, 1, dtype)


def arange(axis: AxisSpec, *, start=0, step=1, dtype=None) -> NamedArray:
    """``start, start + step, ...`` along ``axis``; several axes give the flattened range reshaped.

    >>> arange(Axis("a", 3), start=1).array.tolist()
    [1, 2, 3]
    """
    axes = sized_axes(axis, "Creating an array")
    size = 1
    for a in axes:
        size *= a.size
    values = jnp.arange(size, dtype=dtype) * step + start
    if dtype is not None:
        values = values.astype(dtype)
    return NamedArray(values.reshape(tuple(a.size for a in axes)), axes)


def linspace(axis: AxisSelector, *, start: float, stop: float, endpoint: bool = True, dtype=None):
    """``axis.size`` evenly spaced values from ``start`` to ``stop``."""
    (a,) = sized_axes(axis, "Creating an array")
    return NamedArray(jnp.linspace(start, stop, a.size, endpoint=endpoint, dtype=dtype), (a,))


def logspace(axis: AxisSelector, *, start, stop, endpoint=True, base=10.0, dtype=None) -> NamedArray:
    """``axis.size`` values evenly spaced on a log scale from ``base**start`` to ``base**stop``."""
    (a,) = sized_axes(axis, "Creating an array")
    return NamedArray(jnp.logspace(start, stop, a.size, endpoint=endpoint, base=base, dtype=dtype), (a,))


def geomspace(axis: AxisSelector, *, start, stop, endpoint=True, dtype=None) -> NamedArray:
    """``axis.size`` values in geometric progression from ``start`` to ``stop``."""
    (a,) = sized_axes(axis, "Creating an array")
    return NamedArray(jnp.geomspace(start, stop, a.size, endpoint=endpoint, dtype=dtype), (a,))


def stack(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Stack arrays with identical axes along a new leading ``axis`` (its size is ``len(arrays)``).

    >>> import haliax_lite as hax
    >>> hax.stack("layer", [hax.zeros(Axis("a", 2))] * 3).shape
    {'layer': 3, 'a': 2}
    """
    if not arrays:
        raise ValueError("stack needs at least one array")
    new_axis = Axis(axis_name(axis), len(arrays))
    if isinstance(axis, Axis) and axis.size != len(arrays):
        raise ValueError(f"stack: axis {axis} does not match the {len(arrays)} arrays given")
    first = arrays[0]
    if new_axis.name in first.shape:
        raise ValueError(f"stack: axis {new_axis.name!r} already in the arrays' axes {first.axes}")
    aligned = [_aligned(a, first.axes, "stack") for a in arrays]
    return NamedArray(jnp.stack(aligned, axis=0), (new_axis, *first.axes))


def _aligned(a: NamedArray, axes: tuple[Axis, ...], what: str):
    if set(a.axes) != set(axes):
        raise ValueError(f"{what}: arrays must have the same axes, got shapes {axes} and {a.axes}")
    return a.array if a.axes == axes else jnp.transpose(a.array, [a.axes.index(x) for x in axes])


def concatenate(axis: AxisSelector, arrays: Sequence[NamedArray]) -> NamedArray:
    """Join arrays along an existing axis; the result's axis has the summed size and ``axis``'s name.

    >>> import haliax_lite as hax
    >>> hax.concatenate("a", [hax.zeros(Axis("a", 2)), hax.ones(Axis("a", 3))]).shape
    {'a': 5}
    """
    if not arrays:
        raise ValueError("concatenate needs at least one array")
    name = axis_name(axis)
    first = arrays[0]
    index = first.require_axis_indices(name)
    others = first.axes[:index] + first.axes[index + 1 :]
    parts = []
    for a in arrays:
        a_index = a.require_axis_indices(name)
        rest = a.axes[:a_index] + a.axes[a_index + 1 :]
        check_sizes_agree(others, rest)
        order = (*others[:index], a.axes[a_index], *others[index:])
        parts.append(_aligned(a, order, "concatenate"))
    total = sum(a.axis_size(name) for a in arrays)
    new_axis = Axis(name, total)
    if isinstance(axis, Axis) and axis.size != total:
        raise ValueError(f"concatenate: axis {axis} does not match the total size {total}")
    return NamedArray(jnp.concatenate(parts, axis=index), (*others[:index], new_axis, *others[index:]))
