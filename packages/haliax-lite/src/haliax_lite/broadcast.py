"""Broadcasting by name: identically named axes must agree in size, and one array's axes must contain the
other's (or one must be a scalar). Anything looser is ambiguous and raises ``ValueError``; add axes
explicitly with :func:`broadcast_axis` instead.
"""

from __future__ import annotations

import jax.numpy as jnp

from .axis import Axis, AxisSpec, ensure_tuple
from .core import NamedArray

__all__ = ["broadcast_arrays", "broadcast_axis", "broadcast_to"]


def _shape_str(axes) -> str:
    return "(" + ", ".join(f"{a.name}={a.size}" for a in axes) + ")"


def check_sizes_agree(*axes_lists) -> None:
    """ValueError when one name has two sizes across the given axis tuples."""
    seen: dict[str, Axis] = {}
    for axes in axes_lists:
        for a in axes:
            other = seen.setdefault(a.name, a)
            if other.size != a.size:
                having = [x for x in axes_lists if any(b.name == a.name for b in x)]
                shapes = " and ".join(_shape_str(x) for x in having)
                raise ValueError(
                    f"Axis {a.name!r} has sizes {other.size} and {a.size} in shapes {shapes}; "
                    "the same name must have one size (rename one with hax.rename, or resize the Axis)"
                )


def broadcast_axes(a_axes: tuple[Axis, ...], b_axes: tuple[Axis, ...], require_subset: bool = True):
    """The axes of the broadcast of two arrays (the larger array's order), or ValueError."""
    check_sizes_agree(a_axes, b_axes)
    if a_axes == b_axes or not b_axes:
        return a_axes
    if not a_axes:
        return b_axes
    a_names, b_names = {a.name for a in a_axes}, {b.name for b in b_axes}
    if b_names <= a_names:
        return a_axes
    if a_names <= b_names:
        return b_axes
    if require_subset:
        raise ValueError(
            f"Ambiguous broadcast between shapes {_shape_str(a_axes)} and {_shape_str(b_axes)}: neither "
            f"contains the other (axes only in one: {sorted(a_names ^ b_names)}). "
            "Use hax.broadcast_axis to add the missing axes explicitly."
        )
    return tuple(b for b in b_axes if b.name not in a_names) + a_axes


def broadcast_to(
    a, axes: AxisSpec, ensure_order: bool = True, enforce_no_extra_axes: bool = True
) -> NamedArray:
    """Broadcast ``a`` (a NamedArray or scalar) to have ``axes``.

    With ``ensure_order`` the result has exactly the order of ``axes`` (followed by any extra axes of ``a``
    when ``enforce_no_extra_axes`` is False).

    >>> import haliax_lite as hax
    >>> B, E = hax.Axis("b", 2), hax.Axis("e", 3)
    >>> hax.broadcast_to(hax.ones(E), (B, E)).axes == (B, E)
    True
    """
    axes = ensure_tuple(axes)
    if not isinstance(a, NamedArray):
        if jnp.ndim(a):
            raise ValueError(f"broadcast_to needs a NamedArray or a scalar, got shape {jnp.shape(a)}")
        a = NamedArray(jnp.asarray(a), ())
    check_sizes_agree(a.axes, axes)
    target_names = {ax.name for ax in axes}
    extra = tuple(ax for ax in a.axes if ax.name not in target_names)
    if extra and enforce_no_extra_axes:
        raise ValueError(
            f"Cannot broadcast shape {_shape_str(a.axes)} to {_shape_str(axes)}: extra axes {extra}"
        )
    if not ensure_order and set(a.axes) >= set(axes):
        return a
    full = axes + extra
    if a.axes == full:
        return a
    present = [ax for ax in full if ax in a.axes]
    moved = jnp.transpose(a.array, [a.axes.index(ax) for ax in present]) if a.axes else a.array
    expanded = jnp.expand_dims(moved, [i for i, ax in enumerate(full) if ax not in a.axes])
    return NamedArray(jnp.broadcast_to(expanded, tuple(ax.size for ax in full)), full)


def aligned_raw(a, axes: tuple[Axis, ...]):
    """``a``'s raw array laid out for ``axes``: its axes in their order there, a size-1 dimension for each
    axis it lacks (a scalar or unnamed value is returned as is). ``jax.numpy``'s own broadcasting then
    finishes the job inside the operation, so no full-size copy is materialized and, on a mesh with
    explicit axes, every operand keeps its sharding (a materialized ``broadcast_to`` would be replicated,
    and its gradient would need an all-gather).

    >>> import haliax_lite as hax
    >>> B, E = hax.Axis("b", 2), hax.Axis("e", 3)
    >>> aligned_raw(hax.ones(E), (B, E)).shape
    (1, 3)
    """
    if not isinstance(a, NamedArray):
        return a
    present = [ax for ax in axes if ax in a.axes]
    if len(present) != len(a.axes):
        extra = [ax for ax in a.axes if ax not in axes]
        raise ValueError(f"Cannot align shape {_shape_str(a.axes)} to {_shape_str(axes)}: extra axes {extra}")
    raw = a.array
    if tuple(present) != a.axes:
        raw = jnp.transpose(raw, [a.axes.index(ax) for ax in present])
    if len(present) != len(axes):
        raw = jnp.expand_dims(raw, [i for i, ax in enumerate(axes) if ax not in a.axes])
    return raw


def broadcast_axis(a: NamedArray, axis: AxisSpec) -> NamedArray:
    """Add the axes of ``axis`` that ``a`` lacks, in front of its own axes.

    >>> import haliax_lite as hax
    >>> hax.broadcast_axis(hax.zeros(hax.Axis("m", 2)), hax.Axis("n", 3)).shape
    {'n': 3, 'm': 2}
    """
    axes = ensure_tuple(axis)
    if isinstance(a, NamedArray):
        axes = tuple(ax for ax in axes if ax not in a.axes or ax.name not in a.shape)
        if not axes:
            return a
    return broadcast_to(a, axes, ensure_order=True, enforce_no_extra_axes=False)


def broadcast_arrays(*arrays, require_subset: bool = True, ensure_order: bool = True):
    """Broadcast NamedArrays to one common set of axes; non-NamedArray arguments pass through."""
    full: tuple[Axis, ...] = ()
    for x in arrays:
        if isinstance(x, NamedArray):
            full = broadcast_axes(full, x.axes, require_subset)
    return tuple(
        broadcast_to(x, full, ensure_order=ensure_order) if isinstance(x, NamedArray) else x for x in arrays
    )
