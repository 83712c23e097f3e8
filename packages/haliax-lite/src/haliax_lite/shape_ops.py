"""Changing which axes an array has: rename, reorder, merge, split, unbind."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import jax.numpy as jnp

from .axis import (
    Axis,
    AxisSelection,
    AxisSelector,
    AxisSpec,
    _check_no_duplicates,
    axis_name,
    ensure_tuple,
    rearrange_for_partial_order,
)
from .core import NamedArray

__all__ = ["flatten", "flatten_axes", "rearrange", "rename", "ravel", "split", "unbind", "unflatten_axis"]


def rename(array: NamedArray, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
    """Rename axes: ``rename(x, {"pos": "key_pos"})``; an Axis target must keep the size.

    >>> import haliax_lite as hax
    >>> hax.rename(hax.zeros(hax.Axis("a", 2)), {"a": "b"}).shape
    {'b': 2}
    """
    names = {axis_name(k): v for k, v in renames.items()}
    for name in names:
        array.require_axis_indices(name)
    new_axes = []
    for a in array.axes:
        target = names.get(a.name, a)
        if isinstance(target, Axis) and target.size != a.size:
            raise ValueError(f"rename: {target} does not match the size of {a} in {array.axes}")
        new_axes.append(Axis(axis_name(target), a.size))
    _check_no_duplicates(tuple(new_axes), "the result of rename")
    return NamedArray(array.array, tuple(new_axes))


def rearrange(array: NamedArray, axes, **bindings) -> NamedArray:
    """Reorder axes: ``rearrange(x, (Batch, ..., Embed))`` (``...`` stands for the rest; with several, each
    unlisted axis stays as close to its old place as the order allows, see ``rearrange_for_partial_order``),
    or an einops-style string, e.g. ``rearrange(x, "b (h w) c -> b h w c", h=4)`` (see :mod:`.einops_syntax`).

    >>> import haliax_lite as hax
    >>> x = hax.zeros(hax.make_axes(a=1, b=2, c=3, d=4))
    >>> [a.name for a in rearrange(x, ("c", ..., "a", ...)).axes]
    ['c', 'a', 'b', 'd']
    """
    if isinstance(axes, str):
        from .einops_syntax import rearrange_string

        return rearrange_string(array, axes, **bindings)
    spec = ensure_tuple(axes)
    named = [array.resolve_axis(a) for a in spec if a is not Ellipsis]
    _check_no_duplicates(tuple(named), "rearrange")
    if Ellipsis in spec:
        partial = tuple(a if a is Ellipsis else axis_name(a) for a in spec)
        order = list(rearrange_for_partial_order(partial, array.axes))
    else:
        order = named
        if len(order) != array.ndim:
            missing = [a.name for a in array.axes if a not in named]
            raise ValueError(f"rearrange: axes {missing} of {array.axes} are missing from {spec} (add ...)")
    if tuple(order) == array.axes:
        return array
    return NamedArray(jnp.transpose(array.array, [array.axes.index(a) for a in order]), tuple(order))


def flatten_axes(array: NamedArray, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray:
    """Merge ``old_axes`` (in the given order, C-order) into one ``new_axis``, placed where the first was.

    >>> import haliax_lite as hax
    >>> x = hax.zeros((hax.Axis("a", 2), hax.Axis("b", 3)))
    >>> hax.flatten_axes(x, ("a", "b"), "ab").shape
    {'ab': 6}
    """
    old = array.resolve_axis(ensure_tuple(old_axes))
    if not old:
        raise ValueError("flatten_axes needs at least one axis to merge")
    size = 1
    for a in old:
        size *= a.size
    name = axis_name(new_axis)
    if isinstance(new_axis, Axis) and new_axis.size != size:
        raise ValueError(f"flatten_axes: {new_axis} does not match the merged size {size} of {old}")
    position = min(array.axes.index(a) for a in old)
    others = [a for a in array.axes if a not in old]
    before = [a for a in others if array.axes.index(a) < position]
    after = [a for a in others if array.axes.index(a) > position]
    moved = rearrange(array, (*before, *old, *after))
    shape = tuple(a.size for a in before) + (size,) + tuple(a.size for a in after)
    new_axes = (*before, Axis(name, size), *after)
    _check_no_duplicates(new_axes, "the result of flatten_axes")
    return NamedArray(moved.array.reshape(shape), new_axes)


def unflatten_axis(array: NamedArray, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray:
    """Split ``axis`` into ``new_axes`` (C-order), in its place; the sizes must multiply to its size."""
    position = array.require_axis_indices(axis)
    new = ensure_tuple(new_axes)
    size = 1
    for a in new:
        if not isinstance(a, Axis):
            raise ValueError(f"unflatten_axis needs Axis objects with sizes, got {a!r}")
        size *= a.size
    if size != array.axes[position].size:
        raise ValueError(f"unflatten_axis: {new} (size {size}) does not match {array.axes[position]}")
    axes = array.axes[:position] + new + array.axes[position + 1 :]
    _check_no_duplicates(axes, "the result of unflatten_axis")
    return NamedArray(array.array.reshape(tuple(a.size for a in axes)), axes)


def split(a: NamedArray, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
    """Cut ``axis`` into consecutive pieces with the given axes (whose sizes sum to its size).

    >>> import haliax_lite as hax
    >>> parts = hax.split(hax.arange(hax.Axis("a", 5)), "a", [hax.Axis("a", 2), hax.Axis("b", 3)])
    >>> [p.shape for p in parts]
    [{'a': 2}, {'b': 3}]
    """
    position = a.require_axis_indices(axis)
    total = sum(ax.size for ax in new_axes)
    if total != a.axes[position].size:
        raise ValueError(f"split: sizes of {tuple(new_axes)} sum to {total}, not {a.axes[position]}")
    boundaries = list(itertools.accumulate(ax.size for ax in new_axes))[:-1]
    pieces = jnp.split(a.array, boundaries, axis=position)
    return [
        NamedArray(piece, a.axes[:position] + (ax,) + a.axes[position + 1 :])
        for piece, ax in zip(pieces, new_axes, strict=True)
    ]


def unbind(array: NamedArray, axis: AxisSelector) -> list[NamedArray]:
    """The slices of ``array`` along ``axis``, as a list of arrays without it."""
    position = array.require_axis_indices(axis)
    rest = array.axes[:position] + array.axes[position + 1 :]
    size = array.axes[position].size
    return [NamedArray(jnp.take(array.array, i, axis=position), rest) for i in range(size)]


def ravel(array: NamedArray, new_axis_name: AxisSelector) -> NamedArray:
    """All axes merged into one (C-order)."""
    if not array.axes:
        return NamedArray(array.array.reshape(1), (Axis(axis_name(new_axis_name), 1),))
    return flatten_axes(array, array.axes, new_axis_name)


flatten = ravel
