"""Contractions by name, built on ``jax.lax.dot_general`` one pair of arrays at a time.

Each pair is contracted in the layout ``dot_general`` produces (batch axes, then the left array's free
axes, then the right's); only the final result is transposed to the order the caller asked for, and XLA's
layout assignment usually absorbs that transpose.

On a mesh with *explicit* axes (the default of ``jax.make_mesh``) JAX refuses to guess the output sharding
of a contraction whose contracted dimensions are sharded. Here the output sharding is chosen by name: an
output axis goes where the current axis mapping (:func:`haliax_lite.axis_mapping`) sends it, else where
it was sharded in the inputs; mesh axes that only the contracted dimensions used are reduced over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from .axis import Axis
from .broadcast import check_sizes_agree
from .core import NamedArray
from .partitioning import current_thread_local_mapping, mesh_axis_names

__all__: list[str] = []


def _explicit_spec(raw) -> tuple[tuple[tuple[str, ...], ...], frozenset[str]] | None:
    """Per dimension, the explicit mesh axes ``raw`` is sharded over, and all explicit mesh axes; or None."""
    sharding = getattr(jax.typeof(raw), "sharding", None)
    if not isinstance(sharding, NamedSharding) or sharding.mesh.empty:
        return None
    mesh = sharding.mesh
    explicit = frozenset(
        name for name, kind in zip(mesh.axis_names, mesh.axis_types, strict=True) if kind == AxisType.Explicit
    )
    if not explicit:
        return None
    spec = tuple(sharding.spec) + (None,) * (len(raw.shape) - len(sharding.spec))
    dims = tuple(tuple(n for n in mesh_axis_names(entry) if n in explicit) for entry in spec)
    return dims, explicit


def _output_sharding(lhs, rhs, dims, lhs_free, rhs_free, out_names) -> PartitionSpec | None:
    """The output spec of a pairwise ``dot_general`` whose contracted dims are explicitly sharded."""
    lhs_spec, rhs_spec = _explicit_spec(lhs), _explicit_spec(rhs)
    if lhs_spec is None and rhs_spec is None:
        return None
    (lhs_contract, rhs_contract), (lhs_batch, _) = dims
    sharded = [lhs_spec[0][i] for i in lhs_contract] if lhs_spec else []
    sharded += [rhs_spec[0][i] for i in rhs_contract] if rhs_spec else []
    if not any(sharded):
        return None
    explicit = (lhs_spec or rhs_spec)[1]
    mapping = current_thread_local_mapping() or {}
    from_inputs = [lhs_spec[0][i] if lhs_spec else () for i in (*lhs_batch, *lhs_free)]
    from_inputs += [rhs_spec[0][i] if rhs_spec else () for i in rhs_free]
    used: set[str] = set()
    entries = []
    for name, inherited in zip(out_names, from_inputs, strict=True):
        wanted = mesh_axis_names(mapping[name]) if name in mapping else inherited
        chosen = tuple(n for n in wanted if n in explicit and n not in used)
        used.update(chosen)
        entries.append(None if not chosen else chosen[0] if len(chosen) == 1 else chosen)
    return PartitionSpec(*entries)


def _sum_out(array: NamedArray, keep: set[str]) -> NamedArray:
    """``array`` summed over the axes not in ``keep`` (axes no later step needs)."""
    drop = tuple(i for i, a in enumerate(array.axes) if a.name not in keep)
    if not drop:
        return array
    return NamedArray(jnp.sum(array.array, axis=drop), tuple(a for a in array.axes if a.name in keep))


def _contract_pair(
    lhs: NamedArray, rhs: NamedArray, needed: set[str], precision, preferred_element_type, dot_general
) -> NamedArray:
    """``lhs * rhs`` summed over the shared axes not in ``needed``, in ``dot_general``'s own output order."""
    lhs_names, rhs_names = [a.name for a in lhs.axes], [a.name for a in rhs.axes]
    shared = [n for n in lhs_names if n in rhs_names]
    contracted = [n for n in shared if n not in needed]
    batch = [n for n in shared if n in needed]
    lhs_free = [i for i, n in enumerate(lhs_names) if n not in shared]
    rhs_free = [i for i, n in enumerate(rhs_names) if n not in shared]
    dims = (
        (tuple(lhs_names.index(n) for n in contracted), tuple(rhs_names.index(n) for n in contracted)),
        (tuple(lhs_names.index(n) for n in batch), tuple(rhs_names.index(n) for n in batch)),
    )
    out_axes = (
        tuple(lhs.axes[lhs_names.index(n)] for n in batch)
        + tuple(lhs.axes[i] for i in lhs_free)
        + tuple(rhs.axes[i] for i in rhs_free)
    )
    kwargs = {}
    out_spec = _output_sharding(lhs.array, rhs.array, dims, lhs_free, rhs_free, [a.name for a in out_axes])
    if out_spec is not None:
        kwargs["out_sharding"] = out_spec
    raw = dot_general(
        lhs.array,
        rhs.array,
        dims,
        precision=precision,
        preferred_element_type=preferred_element_type,
        **kwargs,
    )
    return NamedArray(raw, out_axes)


def contract(
    arrays: Sequence[NamedArray],
    out_names: Sequence[str],
    precision=None,
    preferred_element_type=None,
    dot_general: Callable = jax.lax.dot_general,
) -> NamedArray:
    """Multiply ``arrays`` elementwise by name and sum every axis not in ``out_names`` (an einsum)."""
    if not arrays:
        raise ValueError("A contraction needs at least one array")
    check_sizes_agree(*(a.axes for a in arrays))
    all_axes: dict[str, Axis] = {}
    for a in arrays:
        for ax in a.axes:
            all_axes.setdefault(ax.name, ax)
    if len(set(out_names)) != len(out_names):
        raise ValueError(f"An output axis appears twice in {list(out_names)}")
    missing = [n for n in out_names if n not in all_axes]
    if missing:
        raise ValueError(f"Output axes {missing} are in none of the arrays {[a.axes for a in arrays]}")
    out = set(out_names)
    later = [set() for _ in arrays]  # names used by the arrays after position i
    for i in range(len(arrays) - 2, -1, -1):
        later[i] = later[i + 1] | {a.name for a in arrays[i + 1].axes}
    result = _sum_out(arrays[0], out | later[0])
    for i, rhs in enumerate(arrays[1:], start=1):
        needed = out | later[i]
        lhs_names = {a.name for a in result.axes}
        rhs = _sum_out(rhs, needed | lhs_names)
        result = _sum_out(result, needed | {a.name for a in rhs.axes})
        result = _contract_pair(result, rhs, needed, precision, preferred_element_type, dot_general)
    if preferred_element_type is not None and len(arrays) == 1:
        result = result.astype(preferred_element_type)
    order = [[a.name for a in result.axes].index(n) for n in out_names]
    raw = result.array if order == sorted(order) else jnp.transpose(result.array, order)
    return NamedArray(raw, tuple(all_axes[n] for n in out_names))
