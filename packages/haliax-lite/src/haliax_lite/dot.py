"""Contractions by name: ``hax.dot(x, w, axis=Embed)`` sums the product over ``Embed``.

Axes shared by several arrays but not contracted are batch axes; the output keeps every
non-contracted axis in order of first appearance unless ``out_axes`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from .axis import Axis, AxisSelection, axis_name, ensure_tuple, rearrange_for_partial_order
from .broadcast import check_sizes_agree
from .contraction import contract
from .core import NamedArray

__all__ = ["dot"]


def resolve_out_axes(out_axes, default: Sequence[str]) -> list[str]:
    """The result's axis names ordered by ``out_axes``, a partial order that may hold several ``...``
    (see :func:`~haliax_lite.axis.rearrange_for_partial_order`)."""
    try:
        return list(rearrange_for_partial_order(ensure_tuple(out_axes), tuple(default)))
    except ValueError as e:
        raise ValueError(
            f"dot: out_axes {out_axes} does not fit the result's axes {list(default)}: {e}"
        ) from None


def dot(
    *arrays: NamedArray,
    axis: AxisSelection | None,
    precision=None,
    preferred_element_type=None,
    out_axes: AxisSelection | None = None,
    dot_general=jax.lax.dot_general,
) -> NamedArray:
    """Contract ``arrays`` over ``axis`` (None: over every axis, giving a scalar; ``()``: no contraction).

    >>> import haliax_lite as hax
    >>> H, D = hax.Axis("H", 2), hax.Axis("D", 3)
    >>> hax.dot(hax.ones((H, D)), hax.ones(D), axis=D).array.tolist()
    [3.0, 3.0]
    """
    for a in arrays:
        if not isinstance(a, NamedArray):
            raise TypeError(f"hax.dot takes NamedArrays, got {type(a).__name__}")
    seen: list[str] = []
    for a in arrays:
        seen.extend(ax.name for ax in a.axes if ax.name not in seen)
    if axis is None:
        contracted = set(seen)
    else:
        contracted = set(axis_name(ensure_tuple(axis)))
        missing = sorted(contracted - set(seen))
        if missing:
            raise ValueError(f"Contracted axes {missing} are in none of {[a.axes for a in arrays]}")
        given = tuple(ax for ax in ensure_tuple(axis) if isinstance(ax, Axis))
        check_sizes_agree(*(a.axes for a in arrays), given)
    out_names = [n for n in seen if n not in contracted]
    if out_axes is not None:
        out_names = resolve_out_axes(out_axes, out_names)
    return contract(arrays, out_names, precision, preferred_element_type, dot_general)
