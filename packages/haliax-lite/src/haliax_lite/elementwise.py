"""Elementwise functions that are more than a ``jnp`` namesake: ``where`` (and ``nonzero``, its one-argument
form), ``clip``, ``isclose``, two-output functions and ``rsqrt``. The plain wrappers are in :mod:`.unary`
and :mod:`.binary`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._wrap import NamedOrNumeric, binary_arrays, wrap
from .axis import Axis, AxisSelector, axis_name
from .broadcast import aligned_raw, broadcast_axes
from .core import NamedArray

__all__ = ["clip", "divmod", "frexp", "isclose", "modf", "nonzero", "rsqrt", "where"]


def frexp(a: NamedOrNumeric) -> tuple[NamedOrNumeric, NamedOrNumeric]:
    """``jnp.frexp``: mantissa and exponent, each with ``a``'s axes."""
    if not isinstance(a, NamedArray):
        return jnp.frexp(a)
    mantissa, exponent = jnp.frexp(a.array)
    return NamedArray(mantissa, a.axes), NamedArray(exponent, a.axes)


def modf(a: NamedOrNumeric) -> tuple[NamedOrNumeric, NamedOrNumeric]:
    """``jnp.modf``: fractional and integral parts, each with ``a``'s axes."""
    if not isinstance(a, NamedArray):
        return jnp.modf(a)
    fractional, integral = jnp.modf(a.array)
    return NamedArray(fractional, a.axes), NamedArray(integral, a.axes)


def rsqrt(a: NamedOrNumeric) -> NamedOrNumeric:
    """``1 / sqrt(a)`` (``jax.lax.rsqrt``)."""
    return wrap(jax.lax.rsqrt(_raw(a)), _axes(a))


def _raw(a):
    return a.array if isinstance(a, NamedArray) else a


def _axes(a):
    return a.axes if isinstance(a, NamedArray) else None


def divmod(a: NamedOrNumeric, b: NamedOrNumeric) -> tuple[NamedOrNumeric, NamedOrNumeric]:
    """``(a // b, a % b)`` broadcast by name."""
    x, y, axes = binary_arrays(a, b)
    quotient, remainder = jnp.divmod(x, y)
    return wrap(quotient, axes), wrap(remainder, axes)


def where(
    condition: NamedOrNumeric,
    x: NamedOrNumeric | None = None,
    y: NamedOrNumeric | None = None,
    fill_value: int | None = None,
    new_axis: Axis | None = None,
) -> NamedOrNumeric | tuple[NamedArray, ...]:
    """Choose ``x`` where ``condition`` holds, else ``y``, broadcasting all three by name.

    >>> import haliax_lite as hax
    >>> B = hax.Axis("b", 3)
    >>> hax.where(hax.arange(B) > 0, 1.0, 0.0).array.tolist()
    [0.0, 1.0, 1.0]
    """
    if x is None and y is None:
        return _nonzero(condition, fill_value, new_axis)
    if x is None or y is None:
        raise ValueError("hax.where needs both x and y, or neither (then fill_value and new_axis)")
    axes = _common_axes(condition, x, y)
    if axes is None:
        return jnp.where(condition, x, y)
    raw = [aligned_raw(v, axes) for v in (condition, x, y)]
    return NamedArray(jnp.broadcast_to(jnp.where(*raw), tuple(a.size for a in axes)), axes)


def _common_axes(*values) -> tuple[Axis, ...] | None:
    """The axes NamedArrays among ``values`` broadcast to (Haliax's rule), or None if none is named."""
    named = [v for v in values if isinstance(v, NamedArray)]
    if not named:
        return None
    axes: tuple[Axis, ...] = ()
    for v in named:
        axes = broadcast_axes(axes, v.axes)
    return axes


def _nonzero(condition: NamedArray, fill_value, new_axis):
    """One-argument where: per axis of ``condition``, the indices of true elements along ``new_axis``."""
    if not isinstance(condition, NamedArray) or fill_value is None or new_axis is None:
        raise ValueError("hax.where(condition) needs a NamedArray condition, fill_value and new_axis")
    return nonzero(condition, new_axis=new_axis, fill_value=fill_value)


def nonzero(
    array: NamedArray,
    *,
    size: int | Axis | None = None,
    fill_value=None,
    new_axis: AxisSelector | None = None,
) -> tuple[NamedArray, ...]:
    """Indices of the nonzero elements (``jnp.nonzero``): one NamedArray per axis of ``array``, in its
    axis order, all along one new axis (``new_axis``, named ``"nonzero"`` by default).

    The count depends on the data, so under ``jit`` it must be static: ``size=`` (an int, or an Axis as
    in Haliax) or an Axis as ``new_axis`` gives it; past the last nonzero element the indices are
    ``fill_value`` (default 0), and elements beyond ``size`` are dropped. Outside ``jit`` the size may be
    left out.

    >>> import haliax_lite as hax
    >>> x = hax.named([[0, 5, 0], [6, 0, 7]], ("row", "col"))
    >>> rows, cols = nonzero(x)
    >>> rows.axes, rows.array.tolist(), cols.array.tolist()
    ((Axis(name='nonzero', size=3),), [0, 1, 1], [1, 0, 2])
    >>> [i.array.tolist() for i in nonzero(x, new_axis=Axis("hit", 4), fill_value=-1)]
    [[0, 1, 1, -1], [1, 0, 2, -1]]
    """
    if not isinstance(array, NamedArray):
        raise TypeError(f"hax.nonzero needs a NamedArray, got {type(array).__name__}")
    if isinstance(size, Axis):
        if new_axis is not None and axis_name(new_axis) != size.name:
            raise ValueError(f"nonzero: size={size} and new_axis={new_axis!r} name different axes")
        size, new_axis = None, size
    if isinstance(new_axis, Axis):
        if size is not None and size != new_axis.size:
            raise ValueError(f"nonzero: size={size} disagrees with new_axis={new_axis}")
        size = new_axis.size
    elif size is None and isinstance(array.array, jax.core.Tracer):
        raise ValueError(
            f"hax.nonzero of an array with axes {array.axes} under jit needs a static size: pass size= "
            "or an Axis as new_axis"
        )
    indices = jnp.nonzero(array.array, size=size, fill_value=fill_value)
    name = "nonzero" if new_axis is None else axis_name(new_axis)
    result_axis = Axis(name, int(indices[0].shape[0]))
    return tuple(NamedArray(index, (result_axis,)) for index in indices)


def clip(
    array: NamedOrNumeric, a_min: NamedOrNumeric | None = None, a_max: NamedOrNumeric | None = None
) -> NamedOrNumeric:
    """Clamp to ``[a_min, a_max]``; bounds may be NamedArrays broadcast by name."""
    if isinstance(array, NamedArray):
        axes = _common_axes(array, a_min, a_max)
        raw = [aligned_raw(v, axes) for v in (array, a_min, a_max)]
        return NamedArray(jnp.broadcast_to(jnp.clip(*raw), tuple(a.size for a in axes)), axes)
    return jnp.clip(array, _raw(a_min), _raw(a_max))


def isclose(
    a: NamedOrNumeric, b: NamedOrNumeric, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> NamedOrNumeric:
    """Elementwise closeness, broadcasting by name."""
    x, y, axes = binary_arrays(a, b)
    return wrap(jnp.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), axes)
