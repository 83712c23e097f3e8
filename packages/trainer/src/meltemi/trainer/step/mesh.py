"""The device mesh and the two axis mappings, from config, checked against the devices, batch and model.

Mesh axes: ``replica`` (copies with replicated parameters: across slices), ``data`` (data parallelism with
parameters sharded over it: FSDP) and ``model`` (tensor parallelism). Parameters and optimizer state are
stored by the *parameter* mapping, activations follow the *compute* mapping;
``trainer.parameter_axis_mapping`` and ``trainer.compute_axis_mapping`` override entries of the defaults.

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> plan = MeshPlan.of(RunConfig(), devices=jax.devices()[:1])
>>> plan.shape, plan.compute_mapping["batch"]
({'replica': 1, 'data': 1, 'model': 1}, ('replica', 'data'))
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

import haliax_lite as hax
from meltemi.trainer.config import MeshConfig, RunConfig
from meltemi.trainer.errors import MeshError
from meltemi.trainer.model.llama import LlamaAxes

MESH_AXES = ("replica", "data", "model")
DATA_AXES = ("replica", "data")

DEFAULT_PARAMETER_MAPPING: dict[str, str | tuple[str, ...] | None] = {
    "embed": "data",
    "vocab": "model",
    "mlp": "model",
    "kv_heads": "model",
}
DEFAULT_COMPUTE_MAPPING: dict[str, str | tuple[str, ...] | None] = {
    "batch": DATA_AXES,
    "mlp": "model",
    "kv_heads": "model",
}


def _physical(value) -> str | tuple[str, ...] | None:
    return tuple(value) if isinstance(value, list) else value


def resolve_mesh_shape(mesh: MeshConfig, device_count: int) -> dict[str, int]:
    """Mesh sizes with -1 filled in; a ``MeshError`` names the fields when they do not fit the devices.

    >>> resolve_mesh_shape(MeshConfig(data=-1, model=2), 8)
    {'replica': 1, 'data': 4, 'model': 2}
    """
    sizes = {"replica": mesh.replica, "data": mesh.data, "model": mesh.model}
    fixed = math.prod(v for v in sizes.values() if v != -1)
    free = [k for k, v in sizes.items() if v == -1]
    if free:
        if device_count % fixed:
            raise MeshError(
                f"trainer.mesh: the fixed sizes ({fixed} devices) do not divide the {device_count} devices"
            )
        sizes[free[0]] = device_count // fixed
    if math.prod(sizes.values()) != device_count:
        shown = " x ".join(f"trainer.mesh.{k}={v}" for k, v in sizes.items())
        raise MeshError(f"{shown} needs {math.prod(sizes.values())} devices, but there are {device_count}")
    return sizes


def _devices_in_mesh_order(shape: dict[str, int], devices: Sequence[jax.Device]) -> np.ndarray:
    """Devices laid out on the mesh: with several slices, ``replica`` runs across them (the slow network)."""
    sizes = tuple(shape[a] for a in MESH_AXES)
    slices = {getattr(d, "slice_index", 0) for d in devices}
    if len(slices) > 1 and shape["replica"] == len(slices):
        return mesh_utils.create_hybrid_device_mesh(
            (1, shape["data"], shape["model"]), (len(slices), 1, 1), devices
        )
    return np.asarray(devices).reshape(sizes)


def axis_mappings(config: RunConfig) -> tuple[dict, dict]:
    """The parameter and compute axis mappings: the defaults with the config's entries; a ``MeshError``
    names an entry that maps to a mesh axis that does not exist."""
    parameter = {**DEFAULT_PARAMETER_MAPPING}
    parameter.update({k: _physical(v) for k, v in config.trainer.parameter_axis_mapping.items()})
    compute = {**DEFAULT_COMPUTE_MAPPING}
    compute.update({k: _physical(v) for k, v in config.trainer.compute_axis_mapping.items()})
    for field, mapping in (("parameter_axis_mapping", parameter), ("compute_axis_mapping", compute)):
        for logical, physical in mapping.items():
            unknown = [
                p
                for p in ((physical,) if isinstance(physical, str) else physical or ())
                if p not in MESH_AXES
            ]
            if unknown:
                raise MeshError(
                    f"trainer.{field}.{logical}: mesh axes {unknown} do not exist; use {list(MESH_AXES)}"
                )
    return parameter, compute


def check_device_count(config: RunConfig, device_count: int) -> dict[str, int]:
    """The mesh shape ``config`` takes on ``device_count`` devices, after checking, without any device,
    that the mesh, the batch and the model's axes fit them (a ``MeshError`` naming the field): what a
    launcher checks before it starts a cluster.

    >>> check_device_count(RunConfig(), 8)
    {'replica': 1, 'data': 8, 'model': 1}
    """
    shape = resolve_mesh_shape(config.trainer.mesh, device_count)
    _check_fits(config, shape, *axis_mappings(config))
    return shape


def _devices_over(shape: dict[str, int], physical) -> int:
    names = () if physical is None else (physical,) if isinstance(physical, str) else physical
    return math.prod(shape[n] for n in names)


def _model_axes(config: RunConfig) -> list[hax.Axis]:
    model_axes = LlamaAxes.of(config.model)
    return [getattr(model_axes, f.name) for f in dataclasses.fields(model_axes)]


def _check_fits(config: RunConfig, shape: dict[str, int], parameter: dict, compute: dict) -> None:
    data_parallel = _devices_over(shape, compute.get("batch"))
    for size in config.trainer.batch_sizes():
        if size % data_parallel:
            raise MeshError(
                f"trainer.global_batch_size {size} does not split over the {data_parallel} data-parallel "
                f"devices (trainer.mesh.replica x trainer.mesh.data)"
            )
        micro = config.trainer.microbatch_size
        if micro is not None and (size % micro or micro % data_parallel):
            raise MeshError(
                f"trainer.microbatch_size {micro} must divide trainer.global_batch_size {size} and be a "
                f"multiple of the {data_parallel} data-parallel devices"
            )
    for field, mapping in (("parameter_axis_mapping", parameter), ("compute_axis_mapping", compute)):
        for axis in _model_axes(config):
            parts = _devices_over(shape, mapping.get(axis.name))
            if axis.size % parts:
                raise MeshError(
                    f"model axis {axis.name!r} ({axis.size}) does not split over the {parts} devices "
                    f"trainer.{field} maps it to ({mapping.get(axis.name)}): change the mesh or the mapping"
                )


@dataclasses.dataclass(frozen=True)
class MeshPlan:
    """The mesh and the parameter and compute axis mappings, as one value the trainer passes around."""

    mesh: Mesh
    parameter_mapping: dict
    compute_mapping: dict

    @staticmethod
    def of(config: RunConfig, devices: Sequence[jax.Device] | None = None) -> MeshPlan:
        devices = list(devices if devices is not None else jax.devices())
        shape = check_device_count(config, len(devices))
        mesh = Mesh(_devices_in_mesh_order(shape, devices), MESH_AXES, axis_types=(AxisType.Auto,) * 3)
        return MeshPlan(mesh, *axis_mappings(config))

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.mesh.shape)

    def whole_rows(self, rows: int) -> int:
        """``rows`` rounded up to a multiple of the devices a batch's rows are split over (the compute
        mapping's ``batch``), as a batch of inference requests is padded.

        >>> MeshPlan.of(RunConfig(), devices=jax.devices()[:1]).whole_rows(5)
        5
        """
        parallel = self.devices_over(self.compute_mapping.get("batch"))
        return -(-rows // parallel) * parallel

    def devices_over(self, physical) -> int:
        """How many devices a mapping value (a mesh axis, several, or None) splits an axis over."""
        return _devices_over(self.shape, physical)

    def check_fits(self, config: RunConfig) -> None:
        """A ``MeshError`` naming the field when the batch or a model axis does not split over its devices."""
        _check_fits(config, self.shape, self.parameter_mapping, self.compute_mapping)

    def sharding(self, axes: Sequence[hax.Axis], mapping: dict) -> NamedSharding:
        return NamedSharding(self.mesh, hax.partitioning.pspec_for_axis(tuple(axes), mapping))

    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())

    def parameter_shardings(self, tree):
        """Shardings for a tree of (abstract) named arrays, laid out by the parameter mapping."""
        return hax.partitioning.infer_resource_partitions(tree, self.parameter_mapping, mesh=self.mesh)

    def compute_shardings(self, tree):
        """Shardings for a tree of (abstract) named arrays, laid out by the compute mapping."""
        return hax.partitioning.infer_resource_partitions(tree, self.compute_mapping, mesh=self.mesh)

    def sharded_parameters(self, abstract):
        """``abstract`` (shapes, as from ``eqx.filter_eval_shape``) with each leaf carrying its parameter
        sharding: a template that ``hax.state_dict.from_state_dict`` reads straight onto the mesh."""
        shardings = self.parameter_shardings(abstract)
        return jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings
        )


@dataclasses.dataclass(frozen=True)
class InferenceLayout:
    """Where a trained model is read onto to be used (evaluated, sampled, exported), and why: the run's
    axis mappings on a mesh of the devices present."""

    plan: MeshPlan
    reason: str


def _shown(shape: dict[str, int]) -> str:
    return " x ".join(f"{axis} {size}" for axis, size in shape.items() if size > 1) or "one device"


def inference_layout(config: RunConfig, devices: Sequence[jax.Device] | None = None) -> InferenceLayout:
    """The layout of ``config``'s model on ``devices`` (default: all) for inference: the run's own mesh when
    it fits the devices, else every device on the ``data`` axis (the run's ``model`` axis kept when it
    divides them), the parameters sharded by the run's parameter mapping (fully sharded, never a whole copy
    per device) and each batch's rows split over ``replica`` and ``data``. An axis of the model that does
    not split over the devices its mapping names is kept whole, and the reason says so.

    >>> from meltemi.trainer.config import RunConfig
    >>> layout = inference_layout(RunConfig(), jax.devices()[:1])
    >>> layout.plan.shape, layout.reason
    ({'replica': 1, 'data': 1, 'model': 1}, "the run's mesh (one device)")
    """
    devices = list(devices if devices is not None else jax.devices())
    count = len(devices)
    try:
        shape = resolve_mesh_shape(config.trainer.mesh, count)
        reason = f"the run's mesh ({_shown(shape)})"
    except MeshError:
        model = config.trainer.mesh.model
        model = model if model > 0 and count % model == 0 else 1
        shape = {"replica": 1, "data": count // model, "model": model}
        reason = f"chosen for the {count} devices present ({_shown(shape)}): the run's mesh does not fit them"
    parameter, compute = axis_mappings(config)
    compute["batch"] = DATA_AXES
    kept_whole = []
    for mapping in (parameter, compute):
        for axis in _model_axes(config):
            parts = _devices_over(shape, mapping.get(axis.name))
            if axis.size % parts:
                del mapping[axis.name]
                kept_whole.append(f"{axis.name} ({axis.size}) does not split over {parts} devices")
    if kept_whole:
        reason += "; kept whole: " + ", ".join(dict.fromkeys(kept_whole))
    mesh = Mesh(_devices_in_mesh_order(shape, devices), MESH_AXES, axis_types=(AxisType.Auto,) * 3)
    return InferenceLayout(MeshPlan(mesh, parameter, compute), reason)


@contextlib.contextmanager
def placed(plan: MeshPlan | None) -> Iterator[None]:
    """Inside: ``plan``'s mesh and compute axis mapping, so named arrays lay out as the run does (nothing
    without a plan)."""
    if plan is None:
        yield
        return
    with jax.set_mesh(plan.mesh), hax.axis_mapping(plan.compute_mapping):
        yield
