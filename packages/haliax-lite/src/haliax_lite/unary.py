"""Unary elementwise functions: each is its ``jax.numpy`` namesake applied to a NamedArray's values.

Written out one by one (from a table, once) so that readers, IDEs and type checkers see every name.
Each also accepts a plain scalar or array, for which it is the ``jnp`` function.

>>> import haliax_lite as hax
>>> hax.sqrt(hax.full(hax.Axis("a", 2), 4.0)).array.tolist()
[2.0, 2.0]
"""

from __future__ import annotations

import jax.numpy as jnp

from ._wrap import NamedOrNumeric, unary

__all__ = [
    "abs",
    "absolute",
    "angle",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctanh",
    "around",
    "bitwise_count",
    "bitwise_invert",
    "bitwise_not",
    "cbrt",
    "ceil",
    "conj",
    "conjugate",
    "copy",
    "cos",
    "cosh",
    "deg2rad",
    "degrees",
    "exp",
    "exp2",
    "expm1",
    "fabs",
    "fix",
    "floor",
    "i0",
    "imag",
    "invert",
    "iscomplex",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "negative",
    "positive",
    "rad2deg",
    "radians",
    "real",
    "reciprocal",
    "rint",
    "round",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
    "trunc",
]


def abs(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.abs`` elementwise; the axes are kept."""
    return unary(jnp.abs, a)


def absolute(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.absolute`` elementwise; the axes are kept."""
    return unary(jnp.absolute, a)


def angle(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.angle`` elementwise; the axes are kept."""
    return unary(jnp.angle, a)


def arccos(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arccos`` elementwise; the axes are kept."""
    return unary(jnp.arccos, a)


def arccosh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arccosh`` elementwise; the axes are kept."""
    return unary(jnp.arccosh, a)


def arcsin(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arcsin`` elementwise; the axes are kept."""
    return unary(jnp.arcsin, a)


def arcsinh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arcsinh`` elementwise; the axes are kept."""
    return unary(jnp.arcsinh, a)


def arctan(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arctan`` elementwise; the axes are kept."""
    return unary(jnp.arctan, a)


def arctanh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.arctanh`` elementwise; the axes are kept."""
    return unary(jnp.arctanh, a)


def around(a: NamedOrNumeric, decimals: int = 0) -> NamedOrNumeric:
    """``jnp.around`` elementwise; the axes are kept."""
    return unary(jnp.around, a, decimals=decimals)


def bitwise_count(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_count`` elementwise; the axes are kept."""
    return unary(jnp.bitwise_count, a)


def bitwise_invert(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_invert`` elementwise; the axes are kept."""
    return unary(jnp.bitwise_invert, a)


def bitwise_not(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.bitwise_not`` elementwise; the axes are kept."""
    return unary(jnp.bitwise_not, a)


def cbrt(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.cbrt`` elementwise; the axes are kept."""
    return unary(jnp.cbrt, a)


def ceil(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.ceil`` elementwise; the axes are kept."""
    return unary(jnp.ceil, a)


def conj(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.conj`` elementwise; the axes are kept."""
    return unary(jnp.conj, a)


def conjugate(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.conjugate`` elementwise; the axes are kept."""
    return unary(jnp.conjugate, a)


def copy(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.copy`` elementwise; the axes are kept."""
    return unary(jnp.copy, a)


def cos(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.cos`` elementwise; the axes are kept."""
    return unary(jnp.cos, a)


def cosh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.cosh`` elementwise; the axes are kept."""
    return unary(jnp.cosh, a)


def deg2rad(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.deg2rad`` elementwise; the axes are kept."""
    return unary(jnp.deg2rad, a)


def degrees(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.degrees`` elementwise; the axes are kept."""
    return unary(jnp.degrees, a)


def exp(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.exp`` elementwise; the axes are kept."""
    return unary(jnp.exp, a)


def exp2(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.exp2`` elementwise; the axes are kept."""
    return unary(jnp.exp2, a)


def expm1(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.expm1`` elementwise; the axes are kept."""
    return unary(jnp.expm1, a)


def fabs(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.fabs`` elementwise; the axes are kept."""
    return unary(jnp.fabs, a)


def floor(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.floor`` elementwise; the axes are kept."""
    return unary(jnp.floor, a)


def i0(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.i0`` elementwise; the axes are kept."""
    return unary(jnp.i0, a)


def imag(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.imag`` elementwise; the axes are kept."""
    return unary(jnp.imag, a)


def invert(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.invert`` elementwise; the axes are kept."""
    return unary(jnp.invert, a)


def iscomplex(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.iscomplex`` elementwise; the axes are kept."""
    return unary(jnp.iscomplex, a)


def isfinite(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isfinite`` elementwise; the axes are kept."""
    return unary(jnp.isfinite, a)


def isinf(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isinf`` elementwise; the axes are kept."""
    return unary(jnp.isinf, a)


def isnan(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isnan`` elementwise; the axes are kept."""
    return unary(jnp.isnan, a)


def isneginf(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isneginf`` elementwise; the axes are kept."""
    return unary(jnp.isneginf, a)


def isposinf(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isposinf`` elementwise; the axes are kept."""
    return unary(jnp.isposinf, a)


def isreal(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.isreal`` elementwise; the axes are kept."""
    return unary(jnp.isreal, a)


def log(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.log`` elementwise; the axes are kept."""
    return unary(jnp.log, a)


def log10(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.log10`` elementwise; the axes are kept."""
    return unary(jnp.log10, a)


def log1p(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.log1p`` elementwise; the axes are kept."""
    return unary(jnp.log1p, a)


def log2(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.log2`` elementwise; the axes are kept."""
    return unary(jnp.log2, a)


def logical_not(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.logical_not`` elementwise; the axes are kept."""
    return unary(jnp.logical_not, a)


def negative(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.negative`` elementwise; the axes are kept."""
    return unary(jnp.negative, a)


def positive(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.positive`` elementwise; the axes are kept."""
    return unary(jnp.positive, a)


def rad2deg(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.rad2deg`` elementwise; the axes are kept."""
    return unary(jnp.rad2deg, a)


def radians(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.radians`` elementwise; the axes are kept."""
    return unary(jnp.radians, a)


def real(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.real`` elementwise; the axes are kept."""
    return unary(jnp.real, a)


def reciprocal(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.reciprocal`` elementwise; the axes are kept."""
    return unary(jnp.reciprocal, a)


def rint(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.rint`` elementwise; the axes are kept."""
    return unary(jnp.rint, a)


def round(a: NamedOrNumeric, decimals: int = 0) -> NamedOrNumeric:
    """``jnp.round`` elementwise; the axes are kept."""
    return unary(jnp.round, a, decimals=decimals)


def sign(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.sign`` elementwise; the axes are kept."""
    return unary(jnp.sign, a)


def signbit(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.signbit`` elementwise; the axes are kept."""
    return unary(jnp.signbit, a)


def sin(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.sin`` elementwise; the axes are kept."""
    return unary(jnp.sin, a)


def sinc(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.sinc`` elementwise; the axes are kept."""
    return unary(jnp.sinc, a)


def sinh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.sinh`` elementwise; the axes are kept."""
    return unary(jnp.sinh, a)


def square(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.square`` elementwise; the axes are kept."""
    return unary(jnp.square, a)


def sqrt(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.sqrt`` elementwise; the axes are kept."""
    return unary(jnp.sqrt, a)


def tan(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.tan`` elementwise; the axes are kept."""
    return unary(jnp.tan, a)


def tanh(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.tanh`` elementwise; the axes are kept."""
    return unary(jnp.tanh, a)


def trunc(a: NamedOrNumeric) -> NamedOrNumeric:
    """``jnp.trunc`` elementwise; the axes are kept."""
    return unary(jnp.trunc, a)


def fix(a: NamedOrNumeric) -> NamedOrNumeric:
    """Round toward zero (numpy's ``fix``, which is ``jnp.trunc``); the axes are kept."""
    return unary(jnp.trunc, a)
