"""Indexing by name: ``x["batch", 0]``, ``x["pos", 1:5]``, ``x[{"batch": 0, "vocab": idx}]``, ``x.at[...]``.

Integers remove an axis, slices and :class:`~haliax_lite.axis.dslice` keep it (resized), and integer
NamedArrays (advanced indexing) replace it with their own axes, broadcast together by name. A 1-D
unnamed array or list indexes like a NamedArray with the sliced axis's name.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from .axis import Axis, AxisSelector, axis_name, dslice, eliminate_axes
from .broadcast import broadcast_to, check_sizes_agree
from .core import NamedArray

__all__ = ["index", "slice", "take", "updated_slice"]

_py_slice = slice


def _as_dict(array: NamedArray, idx) -> dict[str, object]:
    if isinstance(idx, Mapping):
        items = list(idx.items())
    elif isinstance(idx, tuple) and len(idx) % 2 == 0 and all(isinstance(k, (str, Axis)) for k in idx[::2]):
        items = list(zip(idx[::2], idx[1::2], strict=True))
    else:
        raise TypeError(
            f"Index a NamedArray by name: x['axis', i] or x[{{'axis': i}}], got {idx!r} for axes {array.axes}"
        )
    result = {}
    for key, value in items:
        name = axis_name(key)
        array.axis_indices(name)
        if name in result:
            raise ValueError(f"Axis {name!r} is indexed twice in {idx!r}")
        result[name] = value
    return result


def _normalize_value(array: NamedArray, name: str, value):
    """ints/slices/dslices stay; lists and 1-D arrays become NamedArrays on the sliced axis's name."""
    if isinstance(value, (list, tuple)):
        value = jnp.asarray(value)
    if isinstance(value, (jax.Array,)) or hasattr(value, "ndim") and not isinstance(value, NamedArray):
        value = jnp.asarray(value)
        if value.ndim == 1:
            return NamedArray(value, (Axis(name, value.shape[0]),))
        if value.ndim > 1:
            raise ValueError(f"Unnamed index for axis {name!r} must be 0-d or 1-d, got shape {value.shape}")
        if not jnp.issubdtype(value.dtype, jnp.integer):
            raise TypeError(f"Index for axis {name!r} must be an integer, got dtype {value.dtype}")
        return value
    if isinstance(value, NamedArray) and not jnp.issubdtype(value.dtype, jnp.integer):
        raise TypeError(f"Index array for axis {name!r} must be integer, got dtype {value.dtype}")
    if not isinstance(value, (int, _py_slice, dslice, NamedArray)) or isinstance(value, bool):
        raise TypeError(f"Unsupported index {value!r} for axis {name!r}")
    return value


class _Plan:
    """An index dict turned into one positional index on a transposed array.

    Axes indexed by integers or arrays are moved to the front, so numpy puts the broadcast index axes
    first in the result, followed by the sliced and untouched axes in order.
    """

    def __init__(self, array: NamedArray, idx, dynamic_slices_as_arrays: bool):
        spec = {n: _normalize_value(array, n, v) for n, v in _as_dict(array, idx).items()}
        self.source_axes = array.axes
        self.dynamic: dict[str, dslice] = {}
        for name, value in list(spec.items()):
            if isinstance(value, dslice):
                if dynamic_slices_as_arrays:
                    spec[name] = NamedArray(value.start + jnp.arange(value.size), (Axis(name, value.size),))
                else:
                    self.dynamic[name] = value
                    del spec[name]
        front = [a for a in array.axes if a.name in spec and not isinstance(spec[a.name], _py_slice)]
        back = [a for a in array.axes if a not in front]
        self.perm = [array.axes.index(a) for a in front + back]
        index_arrays = [spec[a.name] for a in front if isinstance(spec[a.name], NamedArray)]
        self.index_axes = _union_in_order([v.axes for v in index_arrays])
        self.positional = tuple(
            broadcast_to(spec[a.name], self.index_axes).array
            if isinstance(spec[a.name], NamedArray)
            else spec[a.name]
            for a in front
        ) + tuple(spec.get(a.name, _py_slice(None)) for a in back)
        self.kept = []
        for a in back:
            if a.name in self.dynamic:
                self.kept.append(a.resize(self.dynamic[a.name].size))
            elif a.name in spec:
                self.kept.append(a.resize(len(range(*spec[a.name].indices(a.size)))))
            else:
                self.kept.append(a)
        clash = {a.name for a in self.index_axes} & {a.name for a in self.kept}
        if clash:
            raise ValueError(
                f"Index arrays have axes {sorted(clash)} that the indexed array {array.axes} keeps; "
                "an index array may only reuse the names of axes it eliminates"
            )
        self.first = min((array.axes.index(a) for a in front), default=0)
        self.result_axes = tuple(self.index_axes) + tuple(self.kept)

    def transposed(self, raw):
        for name, ds in self.dynamic.items():
            raw = jax.lax.dynamic_slice_in_dim(raw, ds.start, ds.size, axis=self._position(name))
        return raw if self.perm == sorted(self.perm) else jnp.transpose(raw, self.perm)

    def _position(self, name: str) -> int:
        return [a.name for a in self.source_axes].index(name)

    def final_order(self) -> list[int]:
        """Positions (in result_axes) that put the index axes where the first indexed axis was."""
        n_index = len(self.index_axes)
        kept_before = sum(1 for a in self.kept if self._position(a.name) < self.first)
        order = list(range(n_index, n_index + len(self.kept)))
        return order[:kept_before] + list(range(n_index)) + order[kept_before:]


def _union_in_order(axes_lists) -> tuple[Axis, ...]:
    check_sizes_agree(*axes_lists)
    result: list[Axis] = []
    for axes in axes_lists:
        result.extend(a for a in axes if a not in result)
    return tuple(result)


def index(array: NamedArray, idx):
    """``array[idx]`` by name (see module docs). All axes eliminated gives a scalar ``jax.Array``.

    >>> import haliax_lite as hax
    >>> x = hax.arange((hax.Axis("a", 2), hax.Axis("b", 3)))
    >>> x["a", 1].array.tolist(), x["b", 1:3].shape
    ([3, 4, 5], {'a': 2, 'b': 2})
    """
    plan = _Plan(array, idx, dynamic_slices_as_arrays=False)
    raw = plan.transposed(array.array)[plan.positional]
    if not plan.result_axes:
        return raw
    order = plan.final_order()
    if order != sorted(order):
        raw = jnp.transpose(raw, order)
    return NamedArray(raw, tuple(plan.result_axes[i] for i in order))


class NamedAt:
    """``x.at[idx]``: functional updates by name, mirroring ``jax.Array.at``."""

    def __init__(self, array: NamedArray):
        self._array = array

    def __getitem__(self, idx) -> _NamedIndexUpdate:
        return _NamedIndexUpdate(self._array, idx)


class _NamedIndexUpdate:
    def __init__(self, array: NamedArray, idx):
        self.array = array
        self.plan = _Plan(array, idx, dynamic_slices_as_arrays=True)

    def _apply(self, method: str, *args, **kwargs) -> NamedArray:
        plan = self.plan
        raw = jnp.transpose(self.array.array, plan.perm)
        values = [broadcast_to(v, plan.result_axes).array if isinstance(v, NamedArray) else v for v in args]
        updated = getattr(raw.at[plan.positional], method)(*values, **kwargs)
        inverse = [plan.perm.index(i) for i in range(len(plan.perm))]
        return NamedArray(jnp.transpose(updated, inverse), self.array.axes)

    def get(self, **kwargs):
        plan = self.plan
        raw = jnp.transpose(self.array.array, plan.perm).at[plan.positional].get(**kwargs)
        return NamedArray(raw, plan.result_axes) if plan.result_axes else raw


for _method in ("set", "add", "subtract", "multiply", "divide", "power", "min", "max", "apply"):
    setattr(
        _NamedIndexUpdate,
        _method,
        lambda self, values, _m=_method, **kwargs: self._apply(_m, values, **kwargs),
    )


def take(array: NamedArray, axis: AxisSelector, index) -> NamedArray:
    """Select along ``axis`` by an int or an integer NamedArray.

    The index's axes replace ``axis``; index axes that ``array`` also has are batch axes (a
    ``take_along_axis``), so ``take(logits, "vocab", targets)`` picks one logit per position.
    """
    position = array.axis_indices(axis)
    name = array.axes[position].name
    if not isinstance(index, NamedArray):
        return NamedArray(jnp.take(array.array, index, axis=position), eliminate_axes(array.axes, name))
    remaining = eliminate_axes(array.axes, name)
    shared = [a for a in index.axes if a.name in {r.name for r in remaining}]
    if not shared:
        out = jnp.take(array.array, index.array, axis=position)
        return NamedArray(out, remaining[:position] + index.axes + remaining[position:])
    check_sizes_agree(remaining, index.axes)
    extra = tuple(a for a in index.axes if a not in remaining)
    out_axes = remaining + extra
    source = broadcast_to(array, (*out_axes, array.axes[position]), enforce_no_extra_axes=True)
    idx = broadcast_to(index, out_axes).array
    gathered = jnp.take_along_axis(source.array, idx[..., None], axis=-1)[..., 0]
    return NamedArray(gathered, out_axes)


def slice(
    array: NamedArray,
    axis: AxisSelector,
    new_axis: AxisSelector | None = None,
    start=0,
    length: int | None = None,
) -> NamedArray:
    """``length`` entries of ``axis`` from a possibly traced ``start``, named ``new_axis`` (default: same)."""
    position = array.axis_indices(axis)
    old = array.axes[position]
    if length is None:
        if not isinstance(new_axis, Axis):
            raise ValueError("slice needs length= or a new_axis with a size")
        length = new_axis.size
    name = axis_name(new_axis) if new_axis is not None else old.name
    out = jax.lax.dynamic_slice_in_dim(array.array, start, length, axis=position)
    return NamedArray(out, array.axes[:position] + (Axis(name, length),) + array.axes[position + 1 :])


def updated_slice(array: NamedArray, start: Mapping[AxisSelector, object], update: NamedArray) -> NamedArray:
    """``array`` with ``update`` written at offsets ``start`` (by axis name, possibly traced).

    ``update`` has the axes of ``array`` (in any order, smaller sizes) except those it omits, which are
    written at a single position.
    """
    starts = {axis_name(k): v for k, v in start.items()}
    for name in starts:
        array.axis_indices(name)
    update_names = {a.name for a in update.axes}
    unknown = sorted(update_names - set(array.shape))
    if unknown:
        raise ValueError(f"updated_slice: update axes {unknown} are not in the array's axes {array.axes}")
    full_axes = tuple(
        next(u for u in update.axes if u.name == a.name) if a.name in update_names else a.resize(1)
        for a in array.axes
    )
    moved = broadcast_to(update, tuple(a for a in full_axes if a.name in update_names))
    raw = moved.array.reshape(tuple(a.size for a in full_axes)).astype(array.dtype)
    offsets = [starts.get(a.name, 0) for a in array.axes]
    return NamedArray(jax.lax.dynamic_update_slice(array.array, raw, offsets), array.axes)
