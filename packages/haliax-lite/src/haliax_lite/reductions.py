"""Reductions over named axes (with ``where=`` masks), and scans along one axis (cumsum, sort, ...).

Every reduction has the form ``f(array, axis=None, *, where=None, ...)``: ``axis`` is an axis, a name or a
tuple of them (None reduces everything), and ``where`` is a boolean NamedArray broadcast by name.

As in Haliax, ``array`` may also be a plain array or a Python scalar (then ``axis`` is positional, as in
``jax.numpy``), or a pytree of them, reduced leaf by leaf, so ``hax.all(x > 0)`` works whatever ``x`` is.

>>> import jax.numpy as jnp, haliax_lite as hax
>>> bool(hax.all(jnp.array([1, 2]) > 0)), bool(hax.any(False))
(True, False)
>>> hax.sum({"a": hax.ones(hax.Axis("x", 2))})["a"].item()
2.0
"""

from __future__ import annotations

import builtins
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .axis import Axis, AxisSelection, AxisSelector, ensure_tuple
from .broadcast import broadcast_to
from .core import NamedArray

_NEED_INITIAL = {"max": "min", "amax": "min", "nanmax": "min", "min": "max", "amin": "max", "nanmin": "max"}

__all__ = [
    "ReductionFunction",
    "SimpleReductionFunction",
    "all",
    "amax",
    "amin",
    "any",
    "argmax",
    "argmin",
    "argsort",
    "cumprod",
    "cumsum",
    "logsumexp",
    "max",
    "mean",
    "min",
    "nancumprod",
    "nancumsum",
    "nanmax",
    "nanmean",
    "nanmin",
    "nanprod",
    "nanstd",
    "nansum",
    "nanvar",
    "prod",
    "ptp",
    "sort",
    "std",
    "sum",
    "var",
]


class ReductionFunction(Protocol):
    """The shape of a masked reduction such as :func:`sum`: ``f(array, axis=None, *, where=None, **kw)``."""

    def __call__(
        self,
        array: NamedArray,
        axis: AxisSelection | None = None,
        *,
        where: NamedArray | None = None,
        **kwargs,
    ) -> NamedArray: ...


class SimpleReductionFunction(Protocol):
    """The shape of a reduction without a mask, such as :func:`argmax`: ``f(array, axis)``."""

    def __call__(self, array: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray: ...


def _identity(dtype, which: str):
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf if which == "min" else jnp.inf
    if jnp.issubdtype(dtype, jnp.bool_):
        return which == "max"
    info = jnp.iinfo(dtype)
    return info.min if which == "min" else info.max


def _is_named(x) -> bool:
    return isinstance(x, NamedArray)


def _positional(name: str, jnp_fn, leaf, axis, **kwargs):
    """``jnp_fn`` on a leaf that is not named: ``axis`` must be positional (or None), as in jax.numpy."""
    if isinstance(axis, (str, Axis)) or (
        isinstance(axis, (tuple, list)) and builtins.any(isinstance(a, (str, Axis)) for a in axis)
    ):
        raise TypeError(f"hax.{name}: axis {axis!r} names an axis, but the array is not a NamedArray")
    if isinstance(kwargs.get("where"), NamedArray):
        raise TypeError(f"hax.{name}: where= is a NamedArray but the array is not named")
    return jnp_fn(leaf, axis=axis, **kwargs)


def leafwise(name: str, named_fn, jnp_fn, tree, axis, **kwargs):
    """``named_fn`` on each NamedArray of ``tree`` and ``jnp_fn`` (positionally) on every other leaf."""
    if _is_named(tree):
        return named_fn(tree)
    if isinstance(tree, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
        return _positional(name, jnp_fn, tree, axis, **kwargs)
    return jax.tree_util.tree_map(
        lambda leaf: leafwise(name, named_fn, jnp_fn, leaf, axis, **kwargs), tree, is_leaf=_is_named
    )


def reduce(name: str, jnp_fn, array: NamedArray, axis: AxisSelection | None, where, **kwargs):
    """Apply a positional reduction over the named ``axis`` of ``array`` (leaf by leaf for other values)."""
    if kwargs.get("keepdims"):
        raise ValueError(
            f"hax.{name}: keepdims is not supported for named arrays (the axis would lose its name)"
        )
    if not _is_named(array):
        extra = {} if where is None else {"where": where}
        return leafwise(
            name,
            lambda a: reduce(name, jnp_fn, a, axis, where, **kwargs),
            jnp_fn,
            array,
            axis,
            **kwargs,
            **extra,
        )
    if axis is None:
        indices = tuple(range(array.ndim))
    else:
        indices = tuple(sorted(set(array.require_axis_indices(ensure_tuple(axis)))))
    if where is not None:
        mask = broadcast_to(where, array.axes) if isinstance(where, NamedArray) else where
        kwargs["where"] = mask.array if isinstance(mask, NamedArray) else mask
        if name in _NEED_INITIAL:
            kwargs.setdefault("initial", _identity(array.dtype, _NEED_INITIAL[name]))
    result = jnp_fn(array.array, axis=indices, **kwargs)
    kept = tuple(a for i, a in enumerate(array.axes) if i not in indices)
    return NamedArray(result, kept)


def axis_wise(jnp_fn, a: NamedArray, axis: AxisSelector | None, **kwargs) -> NamedArray | jax.Array:
    """A positional scan or sort along one named axis (axes unchanged), or over the flattened array."""
    if not _is_named(a):
        return leafwise(
            jnp_fn.__name__, lambda x: axis_wise(jnp_fn, x, axis, **kwargs), jnp_fn, a, axis, **kwargs
        )
    if axis is None:
        return jnp_fn(a.array, axis=None, **kwargs)
    return NamedArray(jnp_fn(a.array, axis=a.require_axis_indices(axis), **kwargs), a.axes)


def sum(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.sum`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("sum", jnp.sum, array, axis, where, **kwargs)


def mean(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.mean`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("mean", jnp.mean, array, axis, where, **kwargs)


def max(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.max`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("max", jnp.max, array, axis, where, **kwargs)


def min(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.min`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("min", jnp.min, array, axis, where, **kwargs)


def prod(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.prod`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("prod", jnp.prod, array, axis, where, **kwargs)


def std(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.std`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("std", jnp.std, array, axis, where, **kwargs)


def var(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.var`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("var", jnp.var, array, axis, where, **kwargs)


def any(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.any`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("any", jnp.any, array, axis, where, **kwargs)


def all(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.all`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("all", jnp.all, array, axis, where, **kwargs)


def ptp(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.ptp`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("ptp", jnp.ptp, array, axis, where, **kwargs)


def nansum(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nansum`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nansum", jnp.nansum, array, axis, where, **kwargs)


def nanmean(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanmean`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanmean", jnp.nanmean, array, axis, where, **kwargs)


def nanmax(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanmax`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanmax", jnp.nanmax, array, axis, where, **kwargs)


def nanmin(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanmin`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanmin", jnp.nanmin, array, axis, where, **kwargs)


def nanprod(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanprod`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanprod", jnp.nanprod, array, axis, where, **kwargs)


def nanstd(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanstd`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanstd", jnp.nanstd, array, axis, where, **kwargs)


def nanvar(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.nanvar`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("nanvar", jnp.nanvar, array, axis, where, **kwargs)


def amax(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.max`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("amax", jnp.max, array, axis, where, **kwargs)


def amin(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jnp.min`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("amin", jnp.min, array, axis, where, **kwargs)


def logsumexp(
    array: NamedArray, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
) -> NamedArray:
    """``jax.nn.logsumexp`` over the named ``axis`` (every axis when None), masked by ``where``."""
    return reduce("logsumexp", jax.nn.logsumexp, array, axis, where, **kwargs)


def cumsum(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.cumsum`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.cumsum, a, axis, **kwargs)


def cumprod(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.cumprod`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.cumprod, a, axis, **kwargs)


def nancumsum(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.nancumsum`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.nancumsum, a, axis, **kwargs)


def nancumprod(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.nancumprod`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.nancumprod, a, axis, **kwargs)


def sort(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.sort`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.sort, a, axis, **kwargs)


def argsort(a: NamedArray, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
    """``jnp.argsort`` along one named axis (axes unchanged); with no axis, over the flattened array."""
    return axis_wise(jnp.argsort, a, axis, **kwargs)


def arg_reduction(jnp_fn, array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """``jnp_fn`` (argmax-like) along ``axis``, removing it; over the flattened array when None."""
    if not _is_named(array):
        return leafwise(jnp_fn.__name__, lambda x: arg_reduction(jnp_fn, x, axis), jnp_fn, array, axis)
    if axis is None:
        return NamedArray(jnp_fn(array.array.reshape(-1)), ())
    index = array.require_axis_indices(axis)
    return NamedArray(jnp_fn(array.array, axis=index), array.axes[:index] + array.axes[index + 1 :])


def argmax(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the maximum along ``axis`` (of the flattened array when None).

    >>> import haliax_lite as hax
    >>> hax.argmax(hax.arange(hax.Axis("a", 4)), "a").item()
    3
    """
    return arg_reduction(jnp.argmax, array, axis)


def argmin(array: NamedArray, axis: AxisSelector | None) -> NamedArray:
    """Index of the minimum along ``axis`` (of the flattened array when None)."""
    return arg_reduction(jnp.argmin, array, axis)
