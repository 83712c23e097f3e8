"""Axis-wise operations that are not reductions: triangles, roll, pad, top-k, trace."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from .axis import Axis, AxisSelection, AxisSelector, axis_name, ensure_tuple, selects_axis
from .core import NamedArray
from .hof import vmap
from .shape_ops import rearrange

__all__ = ["pad", "roll", "top_k", "trace", "tril", "triu"]


def _triangle(jnp_fn, array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int) -> NamedArray:
    """``jnp_fn`` on the ``(axis1, axis2)`` planes; as in Haliax the result's axes end with those two."""
    i, j = array.require_axis_indices(axis1), array.require_axis_indices(axis2)
    if i == j:
        raise ValueError(f"tril/triu need two different axes, got {axis_name(axis1)!r} twice")
    moved = rearrange(array, (..., array.axes[i], array.axes[j]))
    return NamedArray(jnp_fn(moved.array, k=k), moved.axes)


def tril(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
    """Zero the entries with ``index(axis2) > index(axis1) + k`` (``axis1`` is the row axis); the result's
    axes are the others, then ``axis1``, ``axis2`` (Haliax's order).

    >>> import haliax_lite as hax
    >>> R, C = hax.Axis("r", 2), hax.Axis("c", 2)
    >>> hax.tril(hax.ones((R, C)), R, C).array.tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    return _triangle(jnp.tril, array, axis1, axis2, k)


def triu(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
    """Zero the entries with ``index(axis2) < index(axis1) + k`` (``axis1`` is the row axis)."""
    return _triangle(jnp.triu, array, axis1, axis2, k)


def trace(array: NamedArray, axis1: AxisSelector, axis2: AxisSelector, offset: int = 0, dtype=None):
    """Sum of the diagonal of the ``(axis1, axis2)`` plane; both axes are removed."""
    i, j = array.require_axis_indices(axis1), array.require_axis_indices(axis2)
    rest = tuple(a for n, a in enumerate(array.axes) if n not in (i, j))
    return NamedArray(jnp.trace(array.array, offset=offset, axis1=i, axis2=j, dtype=dtype), rest)


def roll(
    array: NamedArray, shift: int | tuple[int, ...] | jax.Array | NamedArray, axis: AxisSelection
) -> NamedArray:
    """Shift entries circularly along ``axis`` (shifts and axes may be tuples of equal length).

    ``shift`` may be traced, and may be a NamedArray: one with axes shifts each slice along them by
    its own amount along those axes (which ``array`` must have; the result keeps ``array``'s axes).

    >>> import haliax_lite as hax
    >>> B, T = hax.Axis("b", 2), hax.Axis("t", 3)
    >>> hax.roll(hax.arange((B, T)), hax.named(jnp.array([0, 1]), B), "t").array.tolist()
    [[0, 1, 2], [5, 3, 4]]
    """
    if isinstance(shift, NamedArray):
        if not jnp.issubdtype(shift.dtype, jnp.integer):
            raise TypeError(f"roll: a shift must be integers, got a NamedArray of {shift.dtype}")
        foreign = [a.name for a in shift.axes if a.name not in array.shape]
        if foreign:
            raise ValueError(
                f"roll: the shift has axes {foreign} that the array {array.axes} lacks; a named shift gives "
                "one amount per slice along the array's own axes"
            )
        clash = [a.name for a in shift.axes if selects_axis(axis, a.name)]
        if clash:
            raise ValueError(
                f"roll: the shift's axes {clash} are also rolled; a shift may vary along other axes"
            )
        if shift.axes:
            rolled = vmap(lambda a, s: roll(a, s, axis), shift.axes)(array, shift)
            return rearrange(rolled, (*array.axes, ...))
        shift = shift.array
    axes = ensure_tuple(axis)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,) * len(axes)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    positions = tuple(array.require_axis_indices(a) for a in axes)
    return NamedArray(jnp.roll(array.array, tuple(shifts), axis=positions), array.axes)


def pad(
    array: NamedArray,
    pad_width: Mapping[AxisSelector, int | tuple[int, int]],
    *,
    mode: str = "constant",
    constant_values=0,
) -> NamedArray:
    """Pad axes by name: ``pad(x, {"pos": (0, 3)})`` adds 3 entries after position; axes grow in place.

    >>> import haliax_lite as hax
    >>> hax.pad(hax.ones(hax.Axis("p", 2)), {"p": (1, 0)}).array.tolist()
    [0.0, 1.0, 1.0]
    """
    widths = [(0, 0)] * array.ndim
    new_axes = list(array.axes)
    for key, width in pad_width.items():
        i = array.require_axis_indices(key)
        before, after = (width, width) if isinstance(width, int) else tuple(width)
        if before < 0 or after < 0:
            raise ValueError(f"pad: negative width {width} for axis {axis_name(key)!r}")
        widths[i] = (before, after)
        new_axes[i] = array.axes[i].resize(array.axes[i].size + before + after)
    kwargs = {"constant_values": constant_values} if mode == "constant" else {}
    return NamedArray(jnp.pad(array.array, widths, mode=mode, **kwargs), tuple(new_axes))


def top_k(
    arr: NamedArray, axis: AxisSelector, k: int, new_axis: AxisSelector | None = None
) -> tuple[NamedArray, NamedArray]:
    """The ``k`` largest values along ``axis`` and their indices; ``axis`` becomes ``new_axis`` (size k).

    >>> import haliax_lite as hax
    >>> values, indices = hax.top_k(hax.arange(hax.Axis("v", 5)), "v", 2)
    >>> values.array.tolist(), indices.array.tolist()
    ([4, 3], [4, 3])
    """
    position = arr.require_axis_indices(axis)
    size = arr.axes[position].size
    if not 0 <= k <= size:
        raise ValueError(f"top_k: k={k} is not within the size {size} of axis {arr.axes[position].name!r}")
    out_axis = Axis(axis_name(new_axis) if new_axis is not None else arr.axes[position].name, k)
    values, indices = jax.lax.top_k(jnp.moveaxis(arr.array, position, -1), k)
    axes = arr.axes[:position] + (out_axis,) + arr.axes[position + 1 :]
    return (
        NamedArray(jnp.moveaxis(values, -1, position), axes),
        NamedArray(jnp.moveaxis(indices, -1, position), axes),
    )
