"""Elementwise functions on NamedArrays, generated from tables of ``jax.numpy`` names.

Unary functions keep the axes; binary functions broadcast by name (see :mod:`haliax_lite.broadcast`).
Every wrapper also accepts plain scalars and arrays, in which case it is just the ``jnp`` function.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .broadcast import broadcast_arrays, broadcast_axes, broadcast_to
from .core import NamedArray

UNARY = (
    "abs absolute angle arccos arccosh arcsin arcsinh arctan arctanh around bitwise_not cbrt ceil conj "
    "conjugate copy cos cosh deg2rad degrees exp exp2 expm1 fabs floor i0 imag invert iscomplex "
    "isfinite isinf isnan isneginf isposinf isreal log log10 log1p log2 logical_not negative positive "
    "rad2deg radians real reciprocal rint round sign signbit sin sinc sinh square sqrt tan tanh trunc"
).split()
BINARY = (
    "add arctan2 bitwise_and bitwise_or bitwise_xor divide equal float_power floor_divide fmax fmin "
    "fmod greater greater_equal hypot left_shift less less_equal logaddexp logaddexp2 logical_and "
    "logical_or logical_xor maximum minimum mod multiply nextafter not_equal power remainder "
    "right_shift subtract true_divide copysign"
).split()
UNARY_TWO_OUTPUTS = ("frexp", "modf")

__all__ = [*UNARY, *BINARY, *UNARY_TWO_OUTPUTS, "clip", "divmod", "isclose", "rsqrt", "where"]


def _unary(name: str):
    jnp_fn = getattr(jnp, name)

    @functools.wraps(jnp_fn)
    def wrapper(a, *args, **kwargs):
        if isinstance(a, NamedArray):
            return NamedArray(jnp_fn(a.array, *args, **kwargs), a.axes)
        return jnp_fn(a, *args, **kwargs)

    wrapper.__doc__ = f"``jnp.{name}`` on a NamedArray, keeping its axes."
    return wrapper


def _binary_arrays(a, b):
    """Raw arrays of a and b broadcast by name, and the result's axes (None if neither is named)."""
    a_named, b_named = isinstance(a, NamedArray), isinstance(b, NamedArray)
    if a_named and b_named:
        axes = broadcast_axes(a.axes, b.axes)
        return broadcast_to(a, axes).array, broadcast_to(b, axes).array, axes
    if a_named:
        return a.array, b, a.axes
    if b_named:
        return a, b.array, b.axes
    return a, b, None


def _wrap(raw, axes):
    return raw if axes is None else NamedArray(raw, axes)


def _binary(name: str):
    jnp_fn = getattr(jnp, name)

    @functools.wraps(jnp_fn)
    def wrapper(a, b, *args, **kwargs):
        x, y, axes = _binary_arrays(a, b)
        return _wrap(jnp_fn(x, y, *args, **kwargs), axes)

    wrapper.__doc__ = f"``jnp.{name}`` on NamedArrays, broadcasting by axis name."
    return wrapper


def _unary_two_outputs(name: str):
    jnp_fn = getattr(jnp, name)

    def wrapper(a):
        if not isinstance(a, NamedArray):
            return jnp_fn(a)
        return tuple(NamedArray(out, a.axes) for out in jnp_fn(a.array))

    wrapper.__name__ = name
    wrapper.__doc__ = f"``jnp.{name}`` on a NamedArray: two NamedArrays with its axes."
    return wrapper


for _name in UNARY:
    globals()[_name] = _unary(_name)
for _name in BINARY:
    globals()[_name] = _binary(_name)
for _name in UNARY_TWO_OUTPUTS:
    globals()[_name] = _unary_two_outputs(_name)


def rsqrt(a):
    """``1 / sqrt(a)`` (``jax.lax.rsqrt``)."""
    return _wrap(jax.lax.rsqrt(_raw(a)), _axes(a))


def _raw(a):
    return a.array if isinstance(a, NamedArray) else a


def _axes(a):
    return a.axes if isinstance(a, NamedArray) else None


def divmod(a, b):
    """``(a // b, a % b)`` broadcast by name."""
    x, y, axes = _binary_arrays(a, b)
    quotient, remainder = jnp.divmod(x, y)
    return _wrap(quotient, axes), _wrap(remainder, axes)


def where(condition, x=None, y=None, fill_value=None, new_axis=None):
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


def clip(array, a_min=None, a_max=None):
    """Clamp to ``[a_min, a_max]``; bounds may be NamedArrays broadcast by name."""
    if isinstance(array, NamedArray):
        array, a_min, a_max = broadcast_arrays(array, a_min, a_max)
        return NamedArray(jnp.clip(array.array, _raw(a_min), _raw(a_max)), array.axes)
    return jnp.clip(array, _raw(a_min), _raw(a_max))


def isclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """Elementwise closeness, broadcasting by name."""
    x, y, axes = _binary_arrays(a, b)
    return _wrap(jnp.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), axes)
