"""Sharding by name: an *axis mapping* sends logical axis names (``"batch"``, ``"embed"``) to mesh axes.

Model code names axes; the mapping, set with the :func:`axis_mapping` context or passed explicitly, says
how each named axis is laid out on the current mesh (``jax.set_mesh``), with explicit or auto mesh axes.

>>> import jax, haliax_lite as hax
>>> with hax.axis_mapping({"batch": "data"}):
...     hax.partitioning.pspec_for_axis((hax.Axis("batch", 8), hax.Axis("embed", 4)))
PartitionSpec('data', None)
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Mapping, Sequence

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .axis import Axis, AxisSelection, AxisSelector, axis_name, ensure_tuple
from .core import NamedArray, is_named_array

__all__ = [
    "ResourceAxis",
    "ResourceMapping",
    "auto_sharded",
    "axis_mapping",
    "current_thread_local_mapping",
    "infer_resource_partitions",
    "physical_axis_name",
    "physical_axis_size",
    "pspec_for",
    "pspec_for_axis",
    "round_axis_for_partitioning",
    "shard",
    "shard_with_axis_mapping",
    "sharding_for_axis",
]

PhysicalAxisSpec = str | Sequence[str]
ResourceMapping = Mapping[str, PhysicalAxisSpec | None]
"""Logical axis name -> mesh axis name, tuple of mesh axis names, or None (replicated)."""


class ResourceAxis(enum.StrEnum):
    """Conventional mesh axis names."""

    MODEL = "model"
    DATA = "data"
    REPLICA = "replica"

    def __str__(self) -> str:
        return self.value


_local = threading.local()


def current_thread_local_mapping() -> ResourceMapping | None:
    """The mapping set by the innermost :func:`axis_mapping` context of this thread, if any."""
    return getattr(_local, "mapping", None)


def _normalize(mapping: ResourceMapping) -> dict[str, PhysicalAxisSpec | None]:
    def physical(v):
        if v is None or isinstance(v, str):
            return str(v) if isinstance(v, ResourceAxis) else v
        return tuple(str(x) for x in v)

    return {str(k): physical(v) for k, v in mapping.items()}


@contextlib.contextmanager
def axis_mapping(mapping: ResourceMapping, *, merge: bool = False, **kwargs):
    """Use ``mapping`` (plus ``kwargs``) for sharding in this thread; ``merge`` adds to the current one.

    >>> with axis_mapping({"batch": "data"}, embed="model"):
    ...     sorted(current_thread_local_mapping().items())
    [('batch', 'data'), ('embed', 'model')]
    """
    previous = current_thread_local_mapping()
    new = dict(previous or {}) if merge else {}
    new.update(_normalize({**mapping, **kwargs}))
    _local.mapping = new
    try:
        yield new
    finally:
        _local.mapping = previous


def _resolve_mapping(mapping: ResourceMapping | None) -> dict | None:
    return _normalize(mapping) if mapping is not None else current_thread_local_mapping()


def physical_axis_name(axis: AxisSelector, mapping: ResourceMapping | None = None) -> PhysicalAxisSpec | None:
    """The mesh axis (or axes) a logical axis maps to, or None."""
    mapping = _resolve_mapping(mapping)
    return None if mapping is None else mapping.get(axis_name(axis))


def _mesh_shape(mesh=None) -> Mapping[str, int] | None:
    if mesh is not None:
        return mesh.shape
    abstract = jax.sharding.get_abstract_mesh()
    return None if abstract.empty else abstract.shape


def physical_axis_size(axis: AxisSelector, mapping: ResourceMapping | None = None, mesh=None) -> int | None:
    """How many devices a logical axis is split over (None if unmapped or no mesh is set)."""
    physical = physical_axis_name(axis, mapping)
    shape = _mesh_shape(mesh)
    if physical is None or shape is None:
        return None
    size = 1
    for name in (physical,) if isinstance(physical, str) else physical:
        if name not in shape:
            raise ValueError(f"Axis {axis_name(axis)!r} maps to {name!r}, not in mesh {dict(shape)}")
        size *= shape[name]
    return size


def round_axis_for_partitioning(axis: Axis, mapping: ResourceMapping | None = None, mesh=None) -> Axis:
    """``axis`` with its size rounded up to a multiple of the devices it is split over.

    >>> round_axis_for_partitioning(Axis("vocab", 50257))  # no mapping: unchanged
    Axis(name='vocab', size=50257)
    """
    parts = physical_axis_size(axis, mapping, mesh)
    if not parts:
        return axis
    return axis.resize(-(-axis.size // parts) * parts)


def pspec_for_axis(axis: AxisSelection, mapping: ResourceMapping | None = None) -> PartitionSpec:
    """The PartitionSpec laying out these axes under ``mapping`` (default: the current one)."""
    mapping = _resolve_mapping(mapping) or {}
    spec, used = [], {}
    for ax in ensure_tuple(axis):
        physical = mapping.get(axis_name(ax))
        for name in () if physical is None else ((physical,) if isinstance(physical, str) else physical):
            if name in used:
                raise ValueError(
                    f"Mesh axis {name!r} is used by both {used[name]!r} and {axis_name(ax)!r} "
                    f"in {ensure_tuple(axis)}"
                )
            used[name] = axis_name(ax)
        spec.append(physical)
    return PartitionSpec(*spec)


def _current_mesh(mesh=None):
    if mesh is not None:
        return mesh
    abstract = jax.sharding.get_abstract_mesh()
    return None if abstract.empty else abstract


def _concrete_mesh(mesh=None) -> Mesh | None:
    if isinstance(mesh, Mesh):
        return mesh
    concrete = jax.sharding.get_mesh()
    return None if concrete is None or concrete.empty else concrete


def _divisible(array_axes, spec: PartitionSpec, mesh_shape) -> bool:
    for ax, physical in zip(array_axes, spec, strict=True):
        if physical is None:
            continue
        parts = 1
        for name in (physical,) if isinstance(physical, str) else physical:
            parts *= mesh_shape[name]
        if ax.size % parts:
            return False
    return True


def _shard_leaf(x: NamedArray, mapping, mesh) -> NamedArray:
    spec = pspec_for_axis(x.axes, mapping)
    for physical in spec:
        for name in () if physical is None else ((physical,) if isinstance(physical, str) else physical):
            if name not in mesh.shape:
                raise ValueError(f"Axis mapping uses mesh axis {name!r}, absent from mesh {dict(mesh.shape)}")
    if not _divisible(x.axes, spec, mesh.shape):
        raise ValueError(
            f"Cannot shard array with axes {x.axes} as {spec} on mesh {dict(mesh.shape)}: sizes not divisible"
        )
    explicit = any(mesh.axis_types[mesh.axis_names.index(n)] == AxisType.Explicit for n in mesh.axis_names)
    if explicit:
        return NamedArray(jax.sharding.reshard(x.array, spec), x.axes)
    if isinstance(x.array, jax.core.Tracer):
        target = NamedSharding(mesh, spec) if isinstance(mesh, Mesh) else spec
        return NamedArray(jax.lax.with_sharding_constraint(x.array, target), x.axes)
    concrete = _concrete_mesh(mesh)
    if concrete is None:
        return x
    return NamedArray(jax.device_put(x.array, NamedSharding(concrete, spec)), x.axes)


def shard(x, mapping: ResourceMapping | None = None, mesh=None):
    """Lay out every NamedArray in ``x`` as ``mapping`` says (a no-op without a mapping or a mesh).

    Inside ``jit`` this is a sharding constraint (or ``reshard`` on explicit mesh axes); outside it
    moves the data.
    """
    mapping = _resolve_mapping(mapping)
    mesh = _current_mesh(mesh)
    if mapping is None or mesh is None:
        return x

    def leaf(v):
        return _shard_leaf(v, mapping, mesh) if isinstance(v, NamedArray) and hasattr(v.array, "shape") else v

    return jax.tree_util.tree_map(leaf, x, is_leaf=is_named_array)


shard_with_axis_mapping = shard


def auto_sharded(x, mesh=None):
    """Shard ``x`` with the current axis mapping (Haliax's older name for :func:`shard`)."""
    return shard(x, current_thread_local_mapping(), mesh)


def sharding_for_axis(axis: AxisSelection, mapping: ResourceMapping | None = None, mesh=None):
    """The NamedSharding for an array with these axes on the current (or given) mesh."""
    concrete = _concrete_mesh(mesh)
    if concrete is None:
        raise ValueError("sharding_for_axis needs a mesh: pass mesh= or use jax.set_mesh")
    return NamedSharding(concrete, pspec_for_axis(axis, mapping))


def pspec_for(tree, resource_mapping: ResourceMapping | None = None):
    """A tree like ``tree`` with a PartitionSpec for each array (NamedArrays keep their axes around it).

    Unnamed arrays are replicated (``PartitionSpec()``).
    """

    def leaf(v):
        if isinstance(v, NamedArray):
            return NamedArray(pspec_for_axis(v.axes, resource_mapping), v.axes)
        if hasattr(v, "shape"):
            return PartitionSpec()
        return None

    return jax.tree_util.tree_map(leaf, tree, is_leaf=is_named_array)


def infer_resource_partitions(
    tree, resource_mapping: ResourceMapping | None = None, preserve_existing_shardings: bool = True, mesh=None
):
    """A tree of NamedShardings for ``tree`` under ``resource_mapping`` (usable as jit in/out shardings).

    With ``preserve_existing_shardings``, unnamed arrays that already have a sharding keep it.
    """
    concrete = _concrete_mesh(mesh)
    if concrete is None:
        raise ValueError("infer_resource_partitions needs a mesh: pass mesh= or use jax.set_mesh")

    def leaf(v):
        if isinstance(v, NamedArray):
            return NamedArray(NamedSharding(concrete, pspec_for_axis(v.axes, resource_mapping)), v.axes)
        if preserve_existing_shardings and isinstance(getattr(v, "sharding", None), NamedSharding):
            return v.sharding
        if hasattr(v, "shape"):
            return NamedSharding(concrete, PartitionSpec())
        return None

    return jax.tree_util.tree_map(leaf, tree, is_leaf=is_named_array)
