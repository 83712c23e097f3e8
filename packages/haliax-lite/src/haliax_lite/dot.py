"""Contractions by name: ``hax.dot(x, w, axis=Embed)`` sums the product over ``Embed``.

Axes shared by several arrays but not contracted are batch axes; the output keeps every
non-contracted axis in order of first appearance unless ``out_axes`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from .axis import Axis, AxisSelection, axis_name, ensure_tuple
from .broadcast import check_sizes_agree
from .contraction import contract
from .core import NamedArray

__all__ = ["dot"]


def resolve_out_axes(out_axes: AxisSelection, default: Sequence[str]) -> list[str]:
    """Expand an ``out_axes`` selection (which may hold one ``...``) against the default order."""
    spec = [ax if ax is Ellipsis else axis_name(ax) for ax in ensure_tuple(out_axes)]
    if spec.count(Ellipsis) > 1:
        raise ValueError(f"out_axes may contain at most one ellipsis, got {out_axes}")
    unknown = [n for n in spec if n is not Ellipsis and n not in default]
    if unknown:
        raise ValueError(f"out_axes {unknown} are not among the result's axes {list(default)}")
    if Ellipsis not in spec:
        if sorted(spec) != sorted(default):
            raise ValueError(f"out_axes {spec} must list exactly the result axes {list(default)}, or use ...")
        return spec
    rest = [n for n in default if n not in spec]
    i = spec.index(Ellipsis)
    return spec[:i] + rest + spec[i + 1 :]


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
