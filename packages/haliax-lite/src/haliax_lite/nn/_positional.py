"""Bridges from named arrays to positional ``jax.nn`` functions: find axis positions, apply, re-wrap.

Private to ``haliax_lite.nn``: the layers call ``jax.nn`` on the raw array once they know which positions
the named axes occupy, so each wrapper costs nothing at trace time beyond a tuple lookup.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from haliax_lite import _namespace as hax


def selector_names(axis) -> tuple[str, ...]:
    """The names in an axis selector: a name, an ``Axis``, a shape dict, or a sequence of those."""
    return hax.axis_name(hax.ensure_tuple(axis))


def axis_positions(x: hax.NamedArray, axis) -> tuple[int, ...]:
    """Positions of the selected axes in ``x``; a ``ValueError`` names any that ``x`` lacks."""
    return tuple(x.require_axis_indices(hax.ensure_tuple(axis)))


def elementwise(fn: Callable, x, **kwargs):
    """Apply an elementwise ``jax.nn`` function to a named array, a JAX array or a scalar."""
    if isinstance(x, hax.NamedArray):
        return hax.NamedArray(fn(x.array, **kwargs), x.axes)
    return fn(x, **kwargs)


def axiswise(fn: Callable, x, axis, **kwargs):
    """Apply a ``jax.nn`` function normalising over ``axis`` (all axes when ``None``); axes are kept."""
    if not isinstance(x, hax.NamedArray):
        return fn(x, axis=axis, **kwargs)
    positions = None if axis is None else axis_positions(x, axis)
    return hax.NamedArray(fn(x.array, axis=positions, **kwargs), x.axes)


def reduction(fn: Callable, x, axis, **kwargs):
    """Apply a ``jax.nn`` reduction over ``axis`` (all axes when ``None``), dropping the reduced axes."""
    if not isinstance(x, hax.NamedArray):
        return fn(x, axis=axis, **kwargs)
    if axis is None:
        return hax.NamedArray(fn(x.array, axis=None, **kwargs), ())
    positions = axis_positions(x, axis)
    kept = tuple(a for i, a in enumerate(x.axes) if i not in positions)
    return hax.NamedArray(fn(x.array, axis=positions, **kwargs), kept)


def split_key(key: jax.Array | None, n: int) -> list:
    """``n`` keys from ``key``, or ``n`` Nones when there is no key (layers that need none accept None)."""
    if key is None:
        return [None] * n
    return list(jax.random.split(key, n))
