"""Elementwise functions that are more than a ``jnp`` namesake: ``where``, ``clip``, ``isclose``, two-output
functions and ``rsqrt``. The plain wrappers are in :mod:`.unary` and :mod:`.binary`."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._wrap import NamedOrNumeric, binary_arrays, wrap
from .axis import Axis
from .broadcast import broadcast_arrays
from .core import NamedArray

__all__ = ["clip", "divmod", "frexp", "isclose", "modf", "rsqrt", "where"]


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
    condition, x, y = broadcast_arrays(condition, x, y)
    named_args = [a for a in (condition, x, y) if isinstance(a, NamedArray)]
    result = jnp.where(_raw(condition), _raw(x), _raw(y))
    return NamedArray(result, named_args[0].axes) if named_args else result


def _nonzero(condition: NamedArray, fill_value, new_axis):
    """One-argument where: per axis of ``condition``, the indices of true elements along ``new_axis``."""
    if not isinstance(condition, NamedArray) or fill_value is None or new_axis is None:
        raise ValueError("hax.where(condition) needs a NamedArray condition, fill_value and new_axis")
    indices = jnp.nonzero(condition.array, size=new_axis.size, fill_value=fill_value)
    return tuple(NamedArray(idx, (new_axis,)) for idx in indices)


def clip(
    array: NamedOrNumeric, a_min: NamedOrNumeric | None = None, a_max: NamedOrNumeric | None = None
) -> NamedOrNumeric:
    """Clamp to ``[a_min, a_max]``; bounds may be NamedArrays broadcast by name."""
    if isinstance(array, NamedArray):
        array, a_min, a_max = broadcast_arrays(array, a_min, a_max)
        return NamedArray(jnp.clip(array.array, _raw(a_min), _raw(a_max)), array.axes)
    return jnp.clip(array, _raw(a_min), _raw(a_max))


def isclose(
    a: NamedOrNumeric, b: NamedOrNumeric, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> NamedOrNumeric:
    """Elementwise closeness, broadcasting by name."""
    x, y, axes = binary_arrays(a, b)
    return wrap(jnp.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), axes)
