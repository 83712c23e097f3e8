"""Binary elementwise functions: each is its ``jax.numpy`` namesake with the arguments broadcast by name.

Written out one by one (from a table, once) so that readers, IDEs and type checkers see every name.
Shared axes may be in any order; the result has the axes of the larger argument (see
:mod:`haliax_lite.broadcast`).

>>> import haliax_lite as hax
>>> A, B = hax.Axis("a", 2), hax.Axis("b", 3)
>>> hax.add(hax.ones((A, B)), hax.ones((B, A))).axes == (A, B)
True
"""

from __future__ import annotations

import jax.numpy as jnp

from ._wrap import NamedOrNumeric, binary

__all__ = [
    "add",
    "arctan2",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "copysign",
    "divide",
    "equal",
    "float_power",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "greater",
    "greater_equal",
    "hypot",
    "left_shift",
    "less",
    "less_equal",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "nextafter",
    "not_equal",
    "power",
    "remainder",
    "right_shift",
    "subtract",
    "true_divide",
]


def add(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.add``, broadcasting by axis name."""
    return binary(jnp.add, a, b)


def arctan2(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arctan2``, broadcasting by axis name."""
    return binary(jnp.arctan2, a, b)


def bitwise_and(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_and``, broadcasting by axis name."""
    return binary(jnp.bitwise_and, a, b)


def bitwise_left_shift(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_left_shift``, broadcasting by axis name."""
    return binary(jnp.bitwise_left_shift, a, b)


def bitwise_or(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_or``, broadcasting by axis name."""
    return binary(jnp.bitwise_or, a, b)


def bitwise_right_shift(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_right_shift``, broadcasting by axis name."""
    return binary(jnp.bitwise_right_shift, a, b)


def bitwise_xor(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_xor``, broadcasting by axis name."""
    return binary(jnp.bitwise_xor, a, b)


def copysign(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.copysign``, broadcasting by axis name."""
    return binary(jnp.copysign, a, b)


def divide(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.divide``, broadcasting by axis name."""
    return binary(jnp.divide, a, b)


def equal(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.equal``, broadcasting by axis name."""
    return binary(jnp.equal, a, b)


def float_power(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.float_power``, broadcasting by axis name."""
    return binary(jnp.float_power, a, b)


def floor_divide(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.floor_divide``, broadcasting by axis name."""
    return binary(jnp.floor_divide, a, b)


def fmax(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.fmax``, broadcasting by axis name."""
    return binary(jnp.fmax, a, b)


def fmin(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.fmin``, broadcasting by axis name."""
    return binary(jnp.fmin, a, b)


def fmod(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.fmod``, broadcasting by axis name."""
    return binary(jnp.fmod, a, b)


def greater(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.greater``, broadcasting by axis name."""
    return binary(jnp.greater, a, b)


def greater_equal(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.greater_equal``, broadcasting by axis name."""
    return binary(jnp.greater_equal, a, b)


def hypot(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.hypot``, broadcasting by axis name."""
    return binary(jnp.hypot, a, b)


def left_shift(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.left_shift``, broadcasting by axis name."""
    return binary(jnp.left_shift, a, b)


def less(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.less``, broadcasting by axis name."""
    return binary(jnp.less, a, b)


def less_equal(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.less_equal``, broadcasting by axis name."""
    return binary(jnp.less_equal, a, b)


def logaddexp(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logaddexp``, broadcasting by axis name."""
    return binary(jnp.logaddexp, a, b)


def logaddexp2(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logaddexp2``, broadcasting by axis name."""
    return binary(jnp.logaddexp2, a, b)


def logical_and(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logical_and``, broadcasting by axis name."""
    return binary(jnp.logical_and, a, b)


def logical_or(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logical_or``, broadcasting by axis name."""
    return binary(jnp.logical_or, a, b)


def logical_xor(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logical_xor``, broadcasting by axis name."""
    return binary(jnp.logical_xor, a, b)


def maximum(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.maximum``, broadcasting by axis name."""
    return binary(jnp.maximum, a, b)


def minimum(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.minimum``, broadcasting by axis name."""
    return binary(jnp.minimum, a, b)


def mod(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.mod``, broadcasting by axis name."""
    return binary(jnp.mod, a, b)


def multiply(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.multiply``, broadcasting by axis name."""
    return binary(jnp.multiply, a, b)


def nextafter(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.nextafter``, broadcasting by axis name."""
    return binary(jnp.nextafter, a, b)


def not_equal(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.not_equal``, broadcasting by axis name."""
    return binary(jnp.not_equal, a, b)


def power(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.power``, broadcasting by axis name."""
    return binary(jnp.power, a, b)


def remainder(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.remainder``, broadcasting by axis name."""
    return binary(jnp.remainder, a, b)


def right_shift(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.right_shift``, broadcasting by axis name."""
    return binary(jnp.right_shift, a, b)


def subtract(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.subtract``, broadcasting by axis name."""
    return binary(jnp.subtract, a, b)


def true_divide(a: NamedOrNumeric, b: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.true_divide``, broadcasting by axis name."""
    return binary(jnp.true_divide, a, b)
