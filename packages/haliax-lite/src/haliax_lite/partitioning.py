"""Sharding by name: an *axis mapping* sends logical axis names (``"batch"``, ``"embed"``) to mesh axes.

Model code names axes; the mapping, set with the :func:`axis_mapping` context or passed explicitly, says
how each named axis is laid out on the current mesh (``jax.set_mesh``), with explicit or auto mesh axes.
A plain array in a module field declared with ``hax.field(axis_names=...)`` is laid out as if it were a
NamedArray with those axes.
:func:`named_jit` compiles a function under a mapping: arrays (named or not) are traced, every other
argument is static (as in ``equinox.filter_jit``), and ``hax.shard`` calls inside use the mapping.

>>> import jax, haliax_lite as hax
>>> with hax.axis_mapping({"batch": "data"}):
...     hax.partitioning.pspec_for_axis((hax.Axis("batch", 8), hax.Axis("embed", 4)))
P('data', None)
"""

from __future__ import annotations

import contextlib
import enum
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from .axis import Axis, AxisSelection, AxisSelector, axis_name, ensure_tuple
from .core import NamedArray, is_named_array
from .field import FieldArray, with_field_axes

__all__ = (
    "ResourceAxis ResourceMapping auto_sharded axis_mapping current_thread_local_mapping fsdp named_jit "
    "infer_resource_partitions physical_axis_name physical_axis_size pspec_for pspec_for_axis "
    "round_axis_for_partitioning shard shard_with_axis_mapping sharding_for_axis"
).split()

PhysicalAxisSpec = str | Sequence[str]
ResourceMapping = Mapping[str, PhysicalAxisSpec | None]
"""Logical axis name -> mesh axis name, tuple of mesh axis names, or None (replicated)."""


class ResourceAxis(enum.StrEnum):
    """Conventional mesh axis names."""

    MODEL = "model"
    DATA = "data"
    REPLICA = "replica"


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


def mesh_axis_names(physical: PhysicalAxisSpec | None) -> tuple[str, ...]:
    """The mesh axes of one mapping value or PartitionSpec entry, as a tuple (none for None/UNCONSTRAINED).

    >>> mesh_axis_names("data"), mesh_axis_names(("replica", "data")), mesh_axis_names(None)
    (('data',), ('replica', 'data'), ())
    """
    if physical is None or physical is PartitionSpec.UNCONSTRAINED:
        return ()
    return (physical,) if isinstance(physical, str) else tuple(physical)


def _current_mesh(mesh=None):
    """The given mesh, else the one set with ``jax.set_mesh`` (abstract inside jit), else None."""
    mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
    return None if mesh.empty else mesh


def physical_axis_size(axis: AxisSelector, mapping: ResourceMapping | None = None, mesh=None) -> int | None:
    """How many devices a logical axis is split over (None if unmapped or no mesh is set)."""
    physical, mesh = physical_axis_name(axis, mapping), _current_mesh(mesh)
    if physical is None or mesh is None:
        return None
    return _device_count(physical, mesh)


def _device_count(physical: PhysicalAxisSpec, mesh) -> int:
    size = 1
    for name in mesh_axis_names(physical):
        if name not in mesh.shape:
            raise ValueError(f"Axis mapping uses mesh axis {name!r}, absent from mesh {dict(mesh.shape)}")
        size *= mesh.shape[name]
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
        for name in mesh_axis_names(physical):
            if name in used:
                raise ValueError(
                    f"Mesh axis {name!r} is used by both {used[name]!r} and {axis_name(ax)!r} "
                    f"in {ensure_tuple(axis)}"
                )
            used[name] = axis_name(ax)
        spec.append(physical)
    return PartitionSpec(*spec)


def _concrete_mesh(mesh=None) -> Mesh | None:
    if isinstance(mesh, Mesh):
        return mesh
    concrete = jax.sharding.get_mesh()
    return None if concrete is None or concrete.empty else concrete


def _shard_leaf(x: NamedArray, mapping, mesh) -> NamedArray:
    spec = pspec_for_axis(x.axes, mapping)
    for ax, physical in zip(x.axes, spec, strict=True):
        if ax.size % _device_count(physical, mesh):
            raise ValueError(
                f"Cannot shard {ax} of {x.axes} over {physical} on mesh {dict(mesh.shape)}: not divisible"
            )
    target = NamedSharding(mesh, spec) if isinstance(mesh, Mesh) else spec
    if AxisType.Explicit in mesh.axis_types:
        return NamedArray(jax.sharding.reshard(x.array, target), x.axes)
    if isinstance(x.array, jax.core.Tracer):
        return NamedArray(jax.lax.with_sharding_constraint(x.array, target), x.axes)
    concrete = _concrete_mesh(mesh)
    return (
        x if concrete is None else NamedArray(jax.device_put(x.array, NamedSharding(concrete, spec)), x.axes)
    )


def shard(x: Any, mapping: ResourceMapping | None = None, mesh: Mesh | None = None) -> Any:
    """Lay out every NamedArray in ``x`` as ``mapping`` says (a no-op without a mapping or a mesh).

    Inside ``jit`` this is a sharding constraint (or ``reshard`` on explicit mesh axes); outside it
    moves the data.
    """
    mapping = _resolve_mapping(mapping)
    mesh = _current_mesh(mesh)
    if mapping is None or mesh is None:
        return x

    def leaf(v):
        if not (isinstance(v, NamedArray) and hasattr(v.array, "shape")):
            return v
        placed = _shard_leaf(v, mapping, mesh)
        return placed.array if isinstance(v, FieldArray) else placed

    return jax.tree_util.tree_map(leaf, with_field_axes(x), is_leaf=is_named_array)


shard_with_axis_mapping = shard


def auto_sharded(x: Any, mesh: Mesh | None = None) -> Any:
    """Shard ``x`` with the current axis mapping (Haliax's older name for :func:`shard`)."""
    return shard(x, current_thread_local_mapping(), mesh)


def sharding_for_axis(
    axis: AxisSelection, mapping: ResourceMapping | None = None, mesh: Mesh | None = None
) -> NamedSharding:
    """The NamedSharding for an array with these axes on the current (or given) mesh."""
    concrete = _concrete_mesh(mesh)
    if concrete is None:
        raise ValueError("sharding_for_axis needs a mesh: pass mesh= or use jax.set_mesh")
    return NamedSharding(concrete, pspec_for_axis(axis, mapping))


def pspec_for(tree: Any, resource_mapping: ResourceMapping | None = None) -> Any:
    """A tree like ``tree`` with a PartitionSpec for each array (NamedArrays keep their axes around it).

    Arrays in ``hax.field(axis_names=...)`` fields are laid out by those names; other unnamed arrays are
    replicated (``PartitionSpec()``).
    """
    return _layout_tree(tree, lambda spec: spec, resource_mapping, preserve_existing_shardings=False)


def infer_resource_partitions(
    tree, resource_mapping: ResourceMapping | None = None, preserve_existing_shardings: bool = True, mesh=None
):
    """A tree of NamedShardings for ``tree`` under ``resource_mapping`` (usable as jit in/out shardings).

    With ``preserve_existing_shardings``, unnamed arrays that already have a sharding keep it.
    """
    concrete = _concrete_mesh(mesh)
    if concrete is None:
        raise ValueError("infer_resource_partitions needs a mesh: pass mesh= or use jax.set_mesh")
    return _layout_tree(
        tree, lambda spec: NamedSharding(concrete, spec), resource_mapping, preserve_existing_shardings
    )


def _layout_tree(tree, make, mapping, preserve_existing_shardings: bool):
    def leaf(v):
        if isinstance(v, NamedArray):
            layout = make(pspec_for_axis(v.axes, mapping))
            return layout if isinstance(v, FieldArray) else NamedArray(layout, v.axes)
        if preserve_existing_shardings and isinstance(getattr(v, "sharding", None), NamedSharding):
            return v.sharding
        return make(PartitionSpec()) if hasattr(v, "shape") else None

    return jax.tree_util.tree_map(leaf, with_field_axes(tree), is_leaf=is_named_array)


class _Static:
    """A hashable wrapper for the static (non-array) part of the arguments."""

    def __init__(self, value):
        self.leaves, self.treedef = jax.tree_util.tree_flatten(value)

    def _key(self):
        return self.treedef, tuple(self.leaves)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, _Static) and self._key() == other._key()

    @property
    def value(self):
        return jax.tree_util.tree_unflatten(self.treedef, self.leaves)


def _signature(donated, kept, static: _Static, mappings) -> tuple:
    """What a compiled version of the function is specialized on (array shapes, static arguments)."""
    leaves, treedef = jax.tree_util.tree_flatten((donated, kept))
    return treedef, tuple((x.shape, x.dtype) for x in leaves), static, mappings


def _frozen(mapping):
    return None if mapping is None else tuple(sorted(_normalize(mapping).items()))


def named_jit(
    fn=None,
    axis_resources: ResourceMapping | None = None,
    *,
    in_axis_resources: ResourceMapping | None = None,
    out_axis_resources: ResourceMapping | None = None,
    donate_args=None,
    donate_kwargs=None,
    **jit_kwargs,
):
    """JIT-compile ``fn`` under an axis mapping.

    ``axis_resources`` (default: the mapping current at call time) is the mapping inside ``fn``;
    ``in_axis_resources``/``out_axis_resources`` (default: ``axis_resources``) lay out the NamedArrays
    going in and out. ``donate_args``/``donate_kwargs`` are pytree prefixes of bools saying which
    argument buffers may be reused. Usable as a decorator with or without arguments.

    >>> import haliax_lite as hax
    >>> f = hax.named_jit(lambda x: x * 2)
    >>> f(hax.ones(hax.Axis("a", 2))).array.tolist()
    [2.0, 2.0]
    """
    if fn is None:
        return functools.partial(
            named_jit,
            axis_resources=axis_resources,
            in_axis_resources=in_axis_resources,
            out_axis_resources=out_axis_resources,
            donate_args=donate_args,
            donate_kwargs=donate_kwargs,
            **jit_kwargs,
        )

    def inner(donated, kept, static, mappings):
        compute, in_map, out_map = (None if m is None else dict(m) for m in mappings)
        args, kwargs = eqx.combine(donated, kept, static.value)
        with axis_mapping(compute or {}):
            if in_map is not None:
                args, kwargs = shard((args, kwargs), in_map)
            out = fn(*args, **kwargs)
            out = shard(out, out_map) if out_map is not None else out
        arrays, static_outputs[_signature(donated, kept, static, mappings)] = eqx.partition(out, eqx.is_array)
        return arrays

    static_outputs: dict = {}  # non-array outputs (functions, ints in modules), recorded while tracing
    jitted = jax.jit(inner, static_argnums=(2, 3), donate_argnums=(0,), **jit_kwargs)

    def prepare(args, kwargs):
        compute = axis_resources if axis_resources is not None else current_thread_local_mapping()
        in_map = in_axis_resources if in_axis_resources is not None else compute
        out_map = out_axis_resources if out_axis_resources is not None else compute
        dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
        n_donate = len(donate_args or ())
        donate_spec = (
            tuple(donate_args or ()) + (False,) * (len(args) - n_donate),
            {k: (donate_kwargs or {}).get(k, False) for k in kwargs},
        )
        donate_mask = jax.tree_util.tree_map(
            lambda flag, sub: jax.tree_util.tree_map(lambda _: bool(flag), sub), donate_spec, dynamic
        )
        donated, kept = eqx.partition(dynamic, donate_mask)
        return donated, kept, _Static(static), (_frozen(compute), _frozen(in_map), _frozen(out_map))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        call = prepare(args, kwargs)
        return eqx.combine(jitted(*call), static_outputs[_signature(*call)])

    wrapper.lower = lambda *args, **kwargs: jitted.lower(*prepare(args, kwargs))
    return wrapper


def fsdp(fn: Callable, parameter_mapping: ResourceMapping, compute_mapping: ResourceMapping) -> Callable:
    """Fully-sharded data parallelism: arguments and results laid out by ``parameter_mapping``, the
    computation by ``compute_mapping`` (``named_jit`` with those mappings)."""
    return named_jit(
        fn,
        axis_resources=compute_mapping,
        in_axis_resources=parameter_mapping,
        out_axis_resources=parameter_mapping,
    )
