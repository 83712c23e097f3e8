"""The methods of :class:`~haliax_lite.core.NamedArray` that forward to ``haliax_lite`` functions.

``x.sum("batch")`` is ``hax.sum(x, "batch")``, ``x + y`` is ``hax.add(x, y)``. Written out (from a table,
once) so that readers, IDEs and type checkers see every method and its parameters.

Imports point down: ``core`` defines the array and knows nothing of the operations; this module imports
``core`` and the operation modules, and :func:`install_methods` (run once by the package's ``__init__``)
copies the methods onto ``NamedArray``. Type checkers see them through ``core``'s ``TYPE_CHECKING`` base.

>>> import haliax_lite as hax
>>> hax.NamedArray.sum is NamedArrayMethods.sum
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax

from . import binary as _binary
from . import broadcast as _broadcast
from . import dot as _dot
from . import elementwise as _elementwise
from . import indexing as _indexing
from . import ops as _ops
from . import reductions as _reductions
from . import shape_ops as _shape_ops
from . import unary as _unary
from .axis import Axis, AxisSelection, AxisSelector, AxisSpec
from .core import NamedArray

__all__ = ["NamedArrayMethods", "install_methods"]


class NamedArrayMethods:
    """Mixed into NamedArray; holds no state of its own."""

    __slots__ = ()

    @property
    def at(self) -> _indexing.NamedAt:
        """Functional updates: ``x.at["batch", 0].set(1.0)`` (see :mod:`haliax_lite.indexing`)."""
        return _indexing.NamedAt(self)

    def __getitem__(self, idx) -> NamedArray:
        """``x["batch", 0]``, ``x[{"vocab": idx}]``: see :func:`haliax_lite.indexing.index`."""
        return _indexing.index(self, idx)

    def all(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.all`` over ``axis`` (every axis when None)."""
        return _reductions.all(self, axis, where=where, **kwargs)

    def any(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.any`` over ``axis`` (every axis when None)."""
        return _reductions.any(self, axis, where=where, **kwargs)

    def max(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.max`` over ``axis`` (every axis when None)."""
        return _reductions.max(self, axis, where=where, **kwargs)

    def min(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.min`` over ``axis`` (every axis when None)."""
        return _reductions.min(self, axis, where=where, **kwargs)

    def mean(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.mean`` over ``axis`` (every axis when None)."""
        return _reductions.mean(self, axis, where=where, **kwargs)

    def prod(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.prod`` over ``axis`` (every axis when None)."""
        return _reductions.prod(self, axis, where=where, **kwargs)

    def std(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.std`` over ``axis`` (every axis when None)."""
        return _reductions.std(self, axis, where=where, **kwargs)

    def var(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.var`` over ``axis`` (every axis when None)."""
        return _reductions.var(self, axis, where=where, **kwargs)

    def sum(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.sum`` over ``axis`` (every axis when None)."""
        return _reductions.sum(self, axis, where=where, **kwargs)

    def ptp(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.ptp`` over ``axis`` (every axis when None)."""
        return _reductions.ptp(self, axis, where=where, **kwargs)

    def logsumexp(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.logsumexp`` over ``axis`` (every axis when None)."""
        return _reductions.logsumexp(self, axis, where=where, **kwargs)

    def nanmean(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nanmean`` over ``axis`` (every axis when None)."""
        return _reductions.nanmean(self, axis, where=where, **kwargs)

    def nansum(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nansum`` over ``axis`` (every axis when None)."""
        return _reductions.nansum(self, axis, where=where, **kwargs)

    def nanmax(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nanmax`` over ``axis`` (every axis when None)."""
        return _reductions.nanmax(self, axis, where=where, **kwargs)

    def nanmin(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nanmin`` over ``axis`` (every axis when None)."""
        return _reductions.nanmin(self, axis, where=where, **kwargs)

    def nanstd(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nanstd`` over ``axis`` (every axis when None)."""
        return _reductions.nanstd(self, axis, where=where, **kwargs)

    def nanvar(
        self, axis: AxisSelection | None = None, *, where: NamedArray | None = None, **kwargs
    ) -> NamedArray:
        """``hax.nanvar`` over ``axis`` (every axis when None)."""
        return _reductions.nanvar(self, axis, where=where, **kwargs)

    def argmax(self, axis: AxisSelector | None) -> NamedArray:
        """``hax.argmax`` along ``axis``."""
        return _reductions.argmax(self, axis)

    def argmin(self, axis: AxisSelector | None) -> NamedArray:
        """``hax.argmin`` along ``axis``."""
        return _reductions.argmin(self, axis)

    def cumsum(self, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
        """``hax.cumsum`` along ``axis``."""
        return _reductions.cumsum(self, axis, **kwargs)

    def cumprod(self, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
        """``hax.cumprod`` along ``axis``."""
        return _reductions.cumprod(self, axis, **kwargs)

    def sort(self, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
        """``hax.sort`` along ``axis``."""
        return _reductions.sort(self, axis, **kwargs)

    def argsort(self, axis: AxisSelector | None = None, **kwargs) -> NamedArray | jax.Array:
        """``hax.argsort`` along ``axis``."""
        return _reductions.argsort(self, axis, **kwargs)

    def isnan(self) -> NamedArray:
        """``hax.isnan`` elementwise."""
        return _unary.isnan(self)

    def isfinite(self) -> NamedArray:
        """``hax.isfinite`` elementwise."""
        return _unary.isfinite(self)

    def conj(self) -> NamedArray:
        """``hax.conj`` elementwise."""
        return _unary.conj(self)

    def conjugate(self) -> NamedArray:
        """``hax.conjugate`` elementwise."""
        return _unary.conjugate(self)

    def imag(self) -> NamedArray:
        """``hax.imag`` elementwise."""
        return _unary.imag(self)

    def real(self) -> NamedArray:
        """``hax.real`` elementwise."""
        return _unary.real(self)

    def round(self, decimals: int = 0) -> NamedArray:
        """``hax.round`` elementwise."""
        return _unary.round(self, decimals=decimals)

    def clip(self, a_min=None, a_max=None) -> NamedArray:
        """``hax.clip``: clamp to ``[a_min, a_max]``."""
        return _elementwise.clip(self, a_min, a_max)

    def dot(self, *others: NamedArray, axis: AxisSelection | None, **kwargs) -> NamedArray:
        """``hax.dot(self, *others, axis=...)``."""
        return _dot.dot(self, *others, axis=axis, **kwargs)

    def rename(self, renames: Mapping[AxisSelector, AxisSelector]) -> NamedArray:
        """``hax.rename(self, ...)``."""
        return _shape_ops.rename(self, renames)

    def rearrange(self, axes, **bindings) -> NamedArray:
        """``hax.rearrange(self, ...)``."""
        return _shape_ops.rearrange(self, axes, **bindings)

    def broadcast_axis(self, axis: AxisSpec) -> NamedArray:
        """``hax.broadcast_axis(self, ...)``."""
        return _broadcast.broadcast_axis(self, axis)

    def broadcast_to(
        self, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
    ) -> NamedArray:
        """``hax.broadcast_to(self, ...)``."""
        return _broadcast.broadcast_to(self, axes, ensure_order, enforce_no_extra_axes)

    def flatten_axes(self, old_axes: AxisSelection, new_axis: AxisSelector) -> NamedArray:
        """``hax.flatten_axes(self, ...)``."""
        return _shape_ops.flatten_axes(self, old_axes, new_axis)

    def unflatten_axis(self, axis: AxisSelector, new_axes: AxisSpec) -> NamedArray:
        """``hax.unflatten_axis(self, ...)``."""
        return _shape_ops.unflatten_axis(self, axis, new_axes)

    def ravel(self, new_axis_name: AxisSelector) -> NamedArray:
        """``hax.ravel(self, ...)``."""
        return _shape_ops.ravel(self, new_axis_name)

    def flatten(self, new_axis_name: AxisSelector) -> NamedArray:
        """``hax.flatten(self, ...)``."""
        return _shape_ops.flatten(self, new_axis_name)

    def take(self, axis: AxisSelector, index) -> NamedArray:
        """``hax.take(self, ...)``."""
        return _indexing.take(self, axis, index)

    def slice(
        self, axis: AxisSelector, new_axis: AxisSelector | None = None, start=0, length: int | None = None
    ) -> NamedArray:
        """``hax.slice(self, ...)``."""
        return _indexing.slice(self, axis, new_axis, start, length)

    def updated_slice(self, start: Mapping[AxisSelector, Any], update: NamedArray) -> NamedArray:
        """``hax.updated_slice(self, ...)``."""
        return _indexing.updated_slice(self, start, update)

    def tril(self, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
        """``hax.tril(self, ...)``."""
        return _ops.tril(self, axis1, axis2, k)

    def triu(self, axis1: AxisSelector, axis2: AxisSelector, k: int = 0) -> NamedArray:
        """``hax.triu(self, ...)``."""
        return _ops.triu(self, axis1, axis2, k)

    def roll(self, shift, axis: AxisSelection) -> NamedArray:
        """``hax.roll(self, ...)``."""
        return _ops.roll(self, shift, axis)

    def trace(self, axis1: AxisSelector, axis2: AxisSelector, offset: int = 0, dtype=None) -> NamedArray:
        """``hax.trace(self, ...)``."""
        return _ops.trace(self, axis1, axis2, offset, dtype)

    def split(self, axis: AxisSelector, new_axes: Sequence[Axis]) -> list[NamedArray]:
        """``hax.split(self, axis, new_axes)``."""
        return _shape_ops.split(self, axis, new_axes)

    def unbind(self, axis: AxisSelector) -> list[NamedArray]:
        """``hax.unbind(self, axis)``."""
        return _shape_ops.unbind(self, axis)

    def top_k(
        self, axis: AxisSelector, k: int, new_axis: AxisSelector | None = None
    ) -> tuple[NamedArray, NamedArray]:
        """``hax.top_k(self, axis, k, new_axis)``."""
        return _ops.top_k(self, axis, k, new_axis)

    # arithmetic, logical and comparison operators broadcast by name (see hax.add etc.)

    def __add__(self, other) -> NamedArray:
        return _binary.add(self, other)

    def __radd__(self, other) -> NamedArray:
        return _binary.add(other, self)

    def __sub__(self, other) -> NamedArray:
        return _binary.subtract(self, other)

    def __rsub__(self, other) -> NamedArray:
        return _binary.subtract(other, self)

    def __mul__(self, other) -> NamedArray:
        return _binary.multiply(self, other)

    def __rmul__(self, other) -> NamedArray:
        return _binary.multiply(other, self)

    def __truediv__(self, other) -> NamedArray:
        return _binary.true_divide(self, other)

    def __rtruediv__(self, other) -> NamedArray:
        return _binary.true_divide(other, self)

    def __floordiv__(self, other) -> NamedArray:
        return _binary.floor_divide(self, other)

    def __rfloordiv__(self, other) -> NamedArray:
        return _binary.floor_divide(other, self)

    def __mod__(self, other) -> NamedArray:
        return _binary.mod(self, other)

    def __rmod__(self, other) -> NamedArray:
        return _binary.mod(other, self)

    def __pow__(self, other) -> NamedArray:
        return _binary.power(self, other)

    def __rpow__(self, other) -> NamedArray:
        return _binary.power(other, self)

    def __and__(self, other) -> NamedArray:
        return _binary.logical_and(self, other)

    def __rand__(self, other) -> NamedArray:
        return _binary.logical_and(other, self)

    def __or__(self, other) -> NamedArray:
        return _binary.logical_or(self, other)

    def __ror__(self, other) -> NamedArray:
        return _binary.logical_or(other, self)

    def __xor__(self, other) -> NamedArray:
        return _binary.logical_xor(self, other)

    def __rxor__(self, other) -> NamedArray:
        return _binary.logical_xor(other, self)

    def __lshift__(self, other) -> NamedArray:
        return _binary.left_shift(self, other)

    def __rlshift__(self, other) -> NamedArray:
        return _binary.left_shift(other, self)

    def __rshift__(self, other) -> NamedArray:
        return _binary.right_shift(self, other)

    def __rrshift__(self, other) -> NamedArray:
        return _binary.right_shift(other, self)

    def __divmod__(self, other) -> tuple[NamedArray, NamedArray]:
        return _elementwise.divmod(self, other)

    def __rdivmod__(self, other) -> tuple[NamedArray, NamedArray]:
        return _elementwise.divmod(other, self)

    def __lt__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.less(self, other)

    def __le__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.less_equal(self, other)

    def __gt__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.greater(self, other)

    def __ge__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.greater_equal(self, other)

    def __eq__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.equal(self, other)

    def __ne__(self, other) -> NamedArray:  # type: ignore[override]
        return _binary.not_equal(self, other)

    def __neg__(self) -> NamedArray:
        return _unary.negative(self)

    def __pos__(self) -> NamedArray:
        return _unary.positive(self)

    def __abs__(self) -> NamedArray:
        return _unary.abs(self)

    def __invert__(self) -> NamedArray:
        return _unary.invert(self)


_NOT_METHODS = frozenset({"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__"})


def install_methods(cls: type = NamedArray) -> None:
    """Copy every method and property of :class:`NamedArrayMethods` onto ``cls`` (NamedArray)."""
    for name, member in vars(NamedArrayMethods).items():
        if name not in _NOT_METHODS:
            setattr(cls, name, member)
