"""Reductions over named axes (with ``where=`` masks), and scans along one axis (cumsum, sort, ...).

Every reduction has the form ``f(array, axis=None, *, where=None, ...)``: ``axis`` is an axis, a name or a
tuple of them (None reduces everything), and ``where`` is a boolean NamedArray broadcast by name.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .axis import AxisSelection, AxisSelector, ensure_tuple
from .broadcast import broadcast_to
from .core import NamedArray

_NAMES = "sum mean max min prod std var any all ptp nansum nanmean nanmax nanmin nanprod nanstd nanvar"
_REDUCTIONS = {name: getattr(jnp, name) for name in _NAMES.split()}
_REDUCTIONS.update(amax=jnp.max, amin=jnp.min, logsumexp=jax.nn.logsumexp)
_NEED_INITIAL = {"max": "min", "amax": "min", "nanmax": "min", "min": "max", "amin": "max", "nanmin": "max"}
_SCANS = {name: getattr(jnp, name) for name in ("cumsum", "cumprod", "nancumsum", "nancumprod")}

__all__ = [*_REDUCTIONS, *_SCANS, "argmax", "argmin", "argsort", "sort"]


def _identity(dtype, which: str):
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf if which == "min" else jnp.inf
    if jnp.issubdtype(dtype, jnp.bool_):
        return which == "max"
    info = jnp.iinfo(dtype)
    return info.min if which == "min" else info.max


def reduce(name: str, jnp_fn, array: NamedArray, axis: AxisSelection | None, where, **kwargs):
    """Apply a positional reduction over the named ``axis`` of ``array``."""
    if not isinstance(array, NamedArray):
        raise TypeError(f"hax.{name} needs a NamedArray, got {type(array).__name__}")
    if axis is None:
        indices = tuple(range(array.ndim))
    else:
        indices = tuple(sorted(set(array.axis_indices(ensure_tuple(axis)))))
    if where is not None:
        mask = broadcast_to(where, array.axes) if isinstance(where, NamedArray) else where
        kwargs["where"] = mask.array if isinstance(mask, NamedArray) else mask
        if name in _NEED_INITIAL:
            kwargs.setdefault("initial", _identity(array.dtype, _NEED_INITIAL[name]))
    result = jnp_fn(array.array, axis=indices, **kwargs)
    kept = tuple(a for i, a in enumerate(array.axes) if i not in indices)
    return NamedArray(result, kept)


def _reduction(name: str, jnp_fn):
    def reduction(array: NamedArray, axis: AxisSelection | None = None, *, where=None, **kwargs):
        return reduce(name, jnp_fn, array, axis, where, **kwargs)

    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = (
        f"``jnp.{name}`` over named axes (all axes when ``axis`` is None), masked by ``where``.\n\n"
        f"Extra keyword arguments (``dtype``, ``ddof``, ...) go to the ``jnp`` function."
    )
    return reduction


def _axis_wise(name: str, jnp_fn):
    def axis_wise(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
        if axis is None:
            return jnp_fn(a.array, axis=None, **kwargs)
        return NamedArray(jnp_fn(a.array, axis=a.axis_indices(axis), **kwargs), a.axes)

    axis_wise.__name__ = axis_wise.__qualname__ = name
    axis_wise.__doc__ = (
        f"``jnp.{name}`` along one named axis; the axes are unchanged. With no axis, as in Haliax, "
        "it runs over the flattened array and returns a 1-d ``jax.Array``."
    )
    return axis_wise


for _name, _fn in _REDUCTIONS.items():
    globals()[_name] = _reduction(_name, _fn)
for _name, _fn in _SCANS.items():
    globals()[_name] = _axis_wise(_name, _fn)
sort = _axis_wise("sort", jnp.sort)
argsort = _axis_wise("argsort", jnp.argsort)


def _arg_reduction(jnp_fn, array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    if axis is None:
        return NamedArray(jnp_fn(array.array.reshape(-1)), ())
    index = array.axis_indices(axis)
    return NamedArray(jnp_fn(array.array, axis=index), array.axes[:index] + array.axes[index + 1 :])


def argmax(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the maximum along ``axis`` (of the flattened array when None).

    >>> import haliax_lite as hax
    >>> hax.argmax(hax.arange(hax.Axis("a", 4)), "a").item()
    3
    """
    return _arg_reduction(jnp.argmax, array, axis)


def argmin(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the minimum along ``axis`` (of the flattened array when None)."""
    return _arg_reduction(jnp.argmin, array, axis)
