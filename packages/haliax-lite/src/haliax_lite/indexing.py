"""Indexing by name: ``x["batch", 0]``, ``x["pos", 1:5]``, ``x[{"batch": 0, "vocab": idx}]``, ``x.at[...]``.

Integers remove an axis, slices and :class:`~haliax_lite.axis.dslice` keep it (resized), and integer
NamedArrays (advanced indexing) replace it with their own axes, broadcast together by name. A 1-D
unnamed array or list indexes like a NamedArray with the sliced axis's name.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from .axis import Axis, AxisSelector, axis_name, dslice, eliminate_axes
from .broadcast import broadcast_to, check_sizes_agree
from .core import NamedArray
from .hof import vmap
from .shape_ops import rearrange

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
        array.require_axis_indices(name)
        if name in result:
            raise ValueError(f"Axis {name!r} is indexed twice in {idx!r}")
        result[name] = value
    return result


def _dslice_positions(value: dslice, axis: Axis, name: str) -> NamedArray:
    """The positions a ``dslice`` reads along ``axis``; a NamedArray start (one per entry of its axes) gives
    positions along those axes too, so each batch element reads its own window."""
    window = NamedArray(jnp.arange(value.size), (axis.resize(value.size),))
    start = value.start
    if isinstance(start, NamedArray):
        _integer_dtype_or_raise(start.dtype, name)
        if name in start.shape:
            raise ValueError(
                f"dslice start for axis {name!r} varies along {name!r} itself; it may vary along other axes"
            )
        return NamedArray(start.array[..., None] + window.array, (*start.axes, *window.axes))
    return NamedArray(start + window.array, window.axes)


def _integer_dtype_or_raise(dtype, name: str) -> None:
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"Index for axis {name!r} must be an integer, got dtype {dtype}")


class _Selection:
    """An index dict turned into one positional index, with the axes of the result (Haliax's rules).

    Integers remove their axis; slices keep it (resized); ``dslice`` and integer NamedArrays are
    *selectors*. Selectors broadcast together by name; an axis the array keeps whose name a selector
    also has is a batch axis (indexed by its own ``arange``), so ``x["vocab", targets]`` picks one entry
    per position. As in numpy, the selectors' axes replace the indexed axes in place when those are
    contiguous (integers count as indexed), and go in front otherwise. A 1-d unnamed array takes the name
    of the first kept axis of its size, else of the axis it indexes; a list indexes positionally.
    """

    def __init__(self, array: NamedArray, idx):
        spec = _as_dict(array, idx)
        self.ordered: list = [_py_slice(None)] * array.ndim
        kept = [True] * array.ndim
        selectors: dict[int, NamedArray] = {}
        self.fill = False
        for name, value in spec.items():
            i = array.require_axis_indices(name)
            if isinstance(value, (list, tuple)):
                self.ordered[i] = jnp.asarray(value)
            elif isinstance(value, _py_slice):
                self.ordered[i] = value
            elif isinstance(value, dslice):
                selectors[i] = _dslice_positions(value, array.axes[i], name)
                self.fill = True
            elif isinstance(value, NamedArray):
                _integer_dtype_or_raise(value.dtype, name)
                selectors[i] = value
            elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
                self.ordered[i] = int(value)  # a static index, like a Python int (as Haliax coerces it)
            elif hasattr(value, "ndim") and hasattr(value, "dtype"):
                _integer_dtype_or_raise(value.dtype, name)
                if value.ndim == 0:
                    self.ordered[i] = value
                elif value.ndim == 1:
                    target = next(
                        (
                            a
                            for j, a in enumerate(array.axes)
                            if j != i and kept[j] and a.size == value.shape[0]
                        ),
                        Axis(name, value.shape[0]),
                    )
                    selectors[i] = NamedArray(jnp.asarray(value), (Axis(target.name, value.shape[0]),))
                else:
                    raise ValueError(
                        f"Unnamed index for axis {name!r} must be 0-d or 1-d, got shape {value.shape}; "
                        "name its axes with hax.named(index, axes) to gather with several dimensions"
                    )
            else:
                raise TypeError(f"Unsupported index {value!r} for axis {name!r}")
            if not isinstance(value, (_py_slice, list, tuple)):
                kept[i] = False
        selector_names = {a.name for s in selectors.values() for a in s.axes}
        for i, a in enumerate(array.axes):
            if kept[i] and a.name in selector_names:
                selectors[i] = NamedArray(jnp.arange(a.size), (a,))
                kept[i] = False
        self.kept_axes = [a for i, a in enumerate(array.axes) if kept[i]]
        if not selectors:
            self.result_names = [a.name for a in self.kept_axes]
            return
        positions = sorted(selectors)
        broadcast = _broadcast_selectors([selectors[i] for i in positions])
        for i in positions:
            self.ordered[i] = broadcast_to(selectors[i], broadcast).array
        removed = [i for i in range(array.ndim) if not kept[i]]
        first, last = removed[0], removed[-1]
        if removed == list(range(first, last + 1)):
            before = [a for a in array.axes[:first]]
            after = [a for a in array.axes[last + 1 :]]
            names = before + list(broadcast) + after
        else:
            names = list(broadcast) + self.kept_axes
        self.result_names = [a.name for a in names]

    def result_axes(self, raw) -> tuple[Axis, ...]:
        return tuple(Axis(n, s) for n, s in zip(self.result_names, raw.shape, strict=True))


def _broadcast_selectors(selectors: list[NamedArray]) -> tuple[Axis, ...]:
    """All selectors' axes broadcast together: the largest keeps its order, the others' go first."""
    check_sizes_agree(*(s.axes for s in selectors))
    result: tuple[Axis, ...] = ()
    for s in sorted(selectors, key=lambda s: s.size, reverse=True):
        result = tuple(a for a in s.axes if a not in result) + result if result else s.axes
    return result


def index(array: NamedArray, idx):
    """``array[idx]`` by name (see :class:`_Selection` for the rules). All axes removed gives a ``jax.Array``.

    A ``dslice`` that runs past the end reads zeros there, as in Haliax.

    >>> import haliax_lite as hax
    >>> x = hax.arange((hax.Axis("a", 2), hax.Axis("b", 3)))
    >>> x["a", 1].array.tolist(), x["b", 1:3].shape
    ([3, 4, 5], {'a': 2, 'b': 2})
    >>> x["b", hax.ds(2, 2)].array.tolist()
    [[2, 0], [5, 0]]
    """
    selection = _Selection(array, idx)
    positional = tuple(selection.ordered)
    if selection.fill:
        raw = array.array.at[positional].get(mode="fill", fill_value=0)
    else:
        raw = array.array[positional]
    if not selection.result_names:
        return raw
    return NamedArray(raw, selection.result_axes(raw))


class NamedAt:
    """``x.at[idx]``: functional updates by name, as ``jax.Array.at``; writes out of bounds are dropped.

    >>> import haliax_lite as hax
    >>> hax.zeros(hax.Axis("a", 3)).at["a", 1].set(2.0).array.tolist()
    [0.0, 2.0, 0.0]
    """

    def __init__(self, array: NamedArray):
        self._array = array

    def __getitem__(self, idx) -> NamedIndexUpdate:
        return NamedIndexUpdate(self._array, idx)


class NamedIndexUpdate:
    """The selected part of an array, to read (``get``) or to update (``set``, ``add``, ...)."""

    def __init__(self, array: NamedArray, idx):
        self.array = array
        self.selection = _Selection(array, idx)
        self.positional = tuple(self.selection.ordered)
        selected = jax.eval_shape(
            lambda raw: raw[self.positional], jax.ShapeDtypeStruct(array.array.shape, array.dtype)
        )
        self.selected_axes = self.selection.result_axes(selected)

    def _update(self, method: str, values, **kwargs) -> NamedArray:
        if isinstance(values, NamedArray):
            values = broadcast_to(values, self.selected_axes).array
        updated = getattr(self.array.array.at[self.positional], method)(values, **kwargs)
        return NamedArray(updated, self.array.axes)

    def get(self, **kwargs) -> NamedArray | jax.Array:
        """The selected values (``mode``/``fill_value`` as in ``jax.Array.at[...].get``)."""
        if self.selection.fill:
            kwargs.setdefault("mode", "fill")
            kwargs.setdefault("fill_value", 0)
        raw = self.array.array.at[self.positional].get(**kwargs)
        return NamedArray(raw, self.selected_axes) if self.selected_axes else raw

    def set(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries replaced by ``values`` (broadcast by name)."""
        return self._update("set", values, **kwargs)

    def add(self, values, **kwargs) -> NamedArray:
        """The array with ``values`` added to the selected entries (repeated indices accumulate)."""
        return self._update("add", values, **kwargs)

    def subtract(self, values, **kwargs) -> NamedArray:
        """The array with ``values`` subtracted from the selected entries."""
        return self._update("subtract", values, **kwargs)

    def multiply(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries multiplied by ``values``."""
        return self._update("multiply", values, **kwargs)

    mul = multiply

    def divide(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries divided by ``values``."""
        return self._update("divide", values, **kwargs)

    def power(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries raised to ``values``."""
        return self._update("power", values, **kwargs)

    def min(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries replaced by their minimum with ``values``."""
        return self._update("min", values, **kwargs)

    def max(self, values, **kwargs) -> NamedArray:
        """The array with the selected entries replaced by their maximum with ``values``."""
        return self._update("max", values, **kwargs)

    def apply(self, func, **kwargs) -> NamedArray:
        """The array with ``func`` applied to each selected entry."""
        return NamedArray(self.array.array.at[self.positional].apply(func, **kwargs), self.array.axes)


def take(array: NamedArray, axis: AxisSelector, index) -> NamedArray:
    """Select along ``axis`` by an int or an integer NamedArray.

    The index's axes replace ``axis``; index axes that ``array`` also has are batch axes (a
    ``take_along_axis``), so ``take(logits, "vocab", targets)`` picks one logit per position.
    """
    position = array.require_axis_indices(axis)
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
    position = array.require_axis_indices(axis)
    old = array.axes[position]
    if length is None:
        if not isinstance(new_axis, Axis):
            raise ValueError("slice needs length= or a new_axis with a size")
        length = new_axis.size
    name = axis_name(new_axis) if new_axis is not None else old.name
    out = jax.lax.dynamic_slice_in_dim(array.array, start, length, axis=position)
    return NamedArray(out, array.axes[:position] + (Axis(name, length),) + array.axes[position + 1 :])


def _check_ragged_starts_fit(array: NamedArray, start: Mapping, update) -> None:
    """Per-entry (NamedArray) starts that are known now must leave room for the update along their axis;
    under ``jit`` they are traced and clamped instead, as ``jax.lax.dynamic_update_slice`` does."""
    update_sizes = update.shape if isinstance(update, NamedArray) else {}
    for key, offsets in start.items():
        name = axis_name(key)
        if not isinstance(offsets, NamedArray) or isinstance(offsets.array, jax.core.Tracer):
            continue
        total, width = array.shape.get(name), update_sizes.get(name, 1)
        if total is None:
            raise ValueError(f"updated_slice: start axis {name!r} is not in the array's axes {array.axes}")
        values = np.asarray(offsets.array)
        bad = np.argwhere((values < 0) | (values > total - width))
        if bad.size:
            where = dict(zip([a.name for a in offsets.axes], (int(i) for i in bad[0]), strict=True))
            raise ValueError(
                f"updated_slice: along axis {name!r} (size {total}) an update of {width} tokens cannot start "
                f"at "
                f"{int(values[tuple(bad[0])])} (at {where}); starts must be in [0, {total - width}]"
            )


def updated_slice(
    array: NamedArray, start: Mapping[AxisSelector, int | jax.Array | NamedArray], update: NamedArray
) -> NamedArray:
    """``array`` with ``update`` written at offsets ``start`` (by axis name), as Haliax's ``updated_slice``.

    ``update`` has axes of ``array`` (any order, sizes up to the array's); it is broadcast along the axes
    it lacks (a scalar update writes one element). A start that is a NamedArray gives one offset per
    entry of its axes, which ``array`` must have (ragged writes, e.g. one new token per sequence at its
    own position). A static start that
    would write past the end is an error; a traced one is clamped so the update fits, as
    ``jax.lax.dynamic_update_slice`` does.

    >>> import haliax_lite as hax
    >>> B, P = hax.Axis("b", 2), hax.Axis("p", 4)
    >>> at = hax.named(jnp.array([1, 3]), B)
    >>> hax.updated_slice(hax.zeros((B, P)), {"p": at}, hax.ones(P.resize(1))).array.tolist()
    [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    """
    mapped = [a.name for s in start.values() if isinstance(s, NamedArray) for a in s.axes]
    mapped = list(dict.fromkeys(mapped))
    if mapped:
        missing = [n for n in mapped if n not in array.shape]
        if missing:
            raise ValueError(
                f"updated_slice: start offsets have axes {missing} that the array {array.axes} lacks; "
                "a NamedArray start must vary along axes of the array it writes into"
            )
        _check_ragged_starts_fit(array, start, update)
        write = updated_slice
        for name in reversed(mapped):
            write = vmap(write, name)
        result = write(array, dict(start), update)
        return rearrange(result, array.axes)
    starts = {axis_name(k): v for k, v in start.items()}
    for name in starts:
        array.require_axis_indices(name)
    update_axes = update.axes if isinstance(update, NamedArray) else ()
    unknown = [a.name for a in update_axes if a.name not in array.shape]
    if unknown:
        raise ValueError(
            f"updated_slice: update axes {unknown} are not in the array's axes {array.axes}; "
            "rename them to the axes they should be written along"
        )
    for a in update_axes:
        offset, total = starts.get(a.name, 0), array.shape[a.name]
        if isinstance(offset, int) and not 0 <= offset <= total - a.size:
            raise ValueError(
                f"updated_slice: an update of {a} starting at {offset} does not fit in axis "
                f"{a.name!r} of size {total}; use a start in [0, {total - a.size}]"
            )
    if not isinstance(update, NamedArray) or not update.axes:
        raw = jnp.reshape(update.array if isinstance(update, NamedArray) else update, (1,) * array.ndim)
    else:
        full_axes = tuple(a.resize(update.shape.get(a.name, a.size)) for a in array.axes)
        raw = broadcast_to(update, full_axes).array
    raw = jnp.asarray(raw).astype(array.dtype)
    offsets = [starts.get(a.name, 0) for a in array.axes]
    offsets = [o.array if isinstance(o, NamedArray) else o for o in offsets]
    return NamedArray(jax.lax.dynamic_update_slice(array.array, raw, offsets), array.axes)
