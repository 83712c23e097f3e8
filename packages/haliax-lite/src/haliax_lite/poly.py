"""Polynomials with a named coefficient axis: ``jax.numpy``'s ``poly*`` family, as Haliax names them.

A polynomial is a 1-D array of coefficients, highest power first (NumPy's convention). Results keep the
coefficient axis of the NamedArray they came from, resized to the result's length; when no input is
named the axis is called :data:`DEFAULT_POLY_AXIS_NAME` (``"degree"``). ``roots`` and ``trim_zeros``
have a data-dependent length, so they run outside ``jit`` only (as their ``jnp`` versions do).

>>> import haliax_lite as hax
>>> p = hax.named([1.0, -3.0, 2.0], "coef")  # x² - 3x + 2 = (x - 1)(x - 2)
>>> hax.polyval(p, hax.named([0.0, 1.0, 3.0], "x")).array.tolist()
[2.0, 0.0, 2.0]
>>> hax.polyder(p).axes
(Axis(name='coef', size=2),)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .axis import Axis, AxisSelector, axis_name
from .core import NamedArray

__all__ = [
    "DEFAULT_POLY_AXIS_NAME",
    "poly",
    "polyadd",
    "polyder",
    "polydiv",
    "polyfit",
    "polyint",
    "polymul",
    "polysub",
    "polyval",
    "roots",
    "trim_zeros",
    "vander",
]

DEFAULT_POLY_AXIS_NAME = "degree"
"""The coefficient axis's name when no input names one."""

ArrayLike = Any
"""What ``jax.numpy`` takes: an array, a sequence of numbers or a scalar."""


def _raw(x) -> jax.Array:
    return x.array if isinstance(x, NamedArray) else jnp.asarray(x)


def _coefficients(raw: jax.Array, *inputs) -> NamedArray:
    """``raw`` along the first named input's (1-D) axis resized to fit, else along ``degree``."""
    base = next((x for x in inputs if isinstance(x, NamedArray)), None)
    if base is None:
        return NamedArray(raw, (Axis(DEFAULT_POLY_AXIS_NAME, raw.shape[0]),))
    if base.ndim != 1:
        raise ValueError(f"Polynomial coefficients must have one axis, got {base.axes}")
    return NamedArray(raw, (base.axes[0].resize(raw.shape[0]),))


def poly(seq_of_zeros: NamedArray | ArrayLike) -> NamedArray:
    """The monic polynomial with these roots (``jnp.poly``), along the roots' axis resized.

    >>> from haliax_lite import named
    >>> poly(named([1.0, 2.0], "r")).array.tolist()
    [1.0, -3.0, 2.0]
    """
    return _coefficients(jnp.poly(_raw(seq_of_zeros)), seq_of_zeros)


def polyadd(p1: NamedArray | ArrayLike, p2: NamedArray | ArrayLike) -> NamedArray:
    """Sum of two polynomials (``jnp.polyadd``); the axis is ``p1``'s if named, else ``p2``'s.

    >>> from haliax_lite import named
    >>> polyadd(named([1.0, 2.0], "c"), [1.0, 1.0, 1.0]).shape
    {'c': 3}
    """
    return _coefficients(jnp.polyadd(_raw(p1), _raw(p2)), p1, p2)


def polysub(p1: NamedArray | ArrayLike, p2: NamedArray | ArrayLike) -> NamedArray:
    """Difference of two polynomials (``jnp.polysub``).

    >>> from haliax_lite import named
    >>> polysub(named([3.0, 2.0], "c"), [1.0, 1.0]).array.tolist()
    [2.0, 1.0]
    """
    return _coefficients(jnp.polysub(_raw(p1), _raw(p2)), p1, p2)


def polymul(p1: NamedArray | ArrayLike, p2: NamedArray | ArrayLike) -> NamedArray:
    """Product of two polynomials (``jnp.polymul``).

    >>> from haliax_lite import named
    >>> polymul(named([1.0, -1.0], "c"), [1.0, -2.0]).array.tolist()
    [1.0, -3.0, 2.0]
    """
    return _coefficients(jnp.polymul(_raw(p1), _raw(p2)), p1, p2)


def polydiv(p1: NamedArray | ArrayLike, p2: NamedArray | ArrayLike) -> tuple[NamedArray, NamedArray]:
    """Quotient and remainder of polynomial division (``jnp.polydiv``), both along the coefficient axis.

    >>> from haliax_lite import named
    >>> q, r = polydiv(named([1.0, -3.0, 2.0], "c"), [1.0, -1.0])
    >>> q.array.tolist(), r.shape
    ([1.0, -2.0], {'c': 3})
    """
    quotient, remainder = jnp.polydiv(_raw(p1), _raw(p2))
    return _coefficients(quotient, p1, p2), _coefficients(remainder, p1, p2)


def polyint(p: NamedArray | ArrayLike, m: int = 1, k: NamedArray | ArrayLike | None = None) -> NamedArray:
    """The ``m``-th antiderivative (``jnp.polyint``) with integration constants ``k``.

    >>> from haliax_lite import named
    >>> polyint(named([3.0, 2.0], "c"), k=5.0).array.tolist()
    [1.5, 2.0, 5.0]
    """
    return _coefficients(jnp.polyint(_raw(p), m=m, k=None if k is None else _raw(k)), p)


def polyder(p: NamedArray | ArrayLike, m: int = 1) -> NamedArray:
    """The ``m``-th derivative (``jnp.polyder``).

    >>> polyder([1.0, 1.0, 1.0]).axes
    (Axis(name='degree', size=2),)
    """
    return _coefficients(jnp.polyder(_raw(p), m=m), p)


def polyval(p: NamedArray | ArrayLike, x: NamedArray | ArrayLike) -> NamedArray | jax.Array:
    """``p`` evaluated at ``x`` (``jnp.polyval``): a NamedArray with ``x``'s axes when ``x`` is named.

    >>> polyval([1.0, 0.0], 3.0).tolist()
    3.0
    """
    result = jnp.polyval(_raw(p), _raw(x))
    return NamedArray(result, x.axes) if isinstance(x, NamedArray) else result


def polyfit(
    x: NamedArray | ArrayLike,
    y: NamedArray | ArrayLike,
    deg: int,
    rcond: float | None = None,
    full: bool = False,
    w: NamedArray | ArrayLike | None = None,
    cov: bool = False,
):
    """Least-squares fit of a degree-``deg`` polynomial (``jnp.polyfit``), coefficients named.

    The coefficients take ``x``'s axis (else ``y``'s, else ``degree``) resized to ``deg + 1``. With
    ``full`` the residuals, rank, singular values and rcond follow as plain arrays; with ``cov`` (and not
    ``full``) the covariance comes second, along the coefficient axis and its ``_cov`` alias.

    >>> from haliax_lite import named
    >>> c = polyfit(named([0.0, 1.0, 2.0], "x"), [1.0, 3.0, 5.0], 1)
    >>> c.axes, [round(v, 4) for v in c.array.tolist()]
    ((Axis(name='x', size=2),), [2.0, 1.0])
    """
    weights = None if w is None else _raw(w)
    result = jnp.polyfit(_raw(x), _raw(y), deg, rcond=rcond, full=full, w=weights, cov=cov)
    if full:
        return (_coefficients(result[0], x, y), *result[1:])
    if not cov:
        return _coefficients(result, x, y)
    coefficients = _coefficients(result[0], x, y)
    axis = coefficients.axes[0]
    return coefficients, NamedArray(result[1], (axis, axis.alias(f"{axis.name}_cov")))


def roots(p: NamedArray | ArrayLike) -> NamedArray:
    """The roots of a polynomial (``jnp.roots``, complex), along its coefficient axis resized.

    >>> from haliax_lite import named
    >>> sorted(roots(named([1.0, -3.0, 2.0], "c")).array.real.round(4).tolist())
    [1.0, 2.0]
    """
    return _coefficients(jnp.roots(_raw(p)), p)


def trim_zeros(f: NamedArray | ArrayLike, trim: str = "fb") -> NamedArray:
    """``f`` without its leading (``"f"``) and/or trailing (``"b"``) zeros (``jnp.trim_zeros``).

    >>> from haliax_lite import named
    >>> trim_zeros(named([0.0, 1.0, 2.0, 0.0], "c")).array.tolist()
    [1.0, 2.0]
    """
    return _coefficients(jnp.trim_zeros(_raw(f), trim=trim), f)


def vander(x: NamedArray, degree: AxisSelector) -> NamedArray:
    """The Vandermonde matrix of 1-D ``x`` (``jnp.vander``): axes ``x``'s then ``degree``.

    ``degree`` as an Axis sets the number of columns; as a name the matrix is square.

    >>> from haliax_lite import named
    >>> vander(named([2.0, 3.0], "x"), Axis("power", 3)).array.tolist()
    [[4.0, 2.0, 1.0], [9.0, 3.0, 1.0]]
    """
    if x.ndim != 1:
        raise ValueError(f"vander needs a 1-D array, got axes {x.axes}")
    power = degree if isinstance(degree, Axis) else Axis(axis_name(degree), x.axes[0].size)
    return NamedArray(jnp.vander(x.array, N=power.size), (x.axes[0], power))
