"""Load a Hugging Face Llama directory into our model, or into a fresh train state to go on pretraining.

The directory is a local path or a bucket URL, read in place: ``config.json``, the safetensors headers,
then one tensor at a time. Every tensor's shape is checked against the config from the headers before any
data is read; a mismatch names the tensor and both shapes. Export then import gives the same bits (in the
exported dtype). Given the run's ``MeshPlan``, each tensor is placed straight onto the mesh as the plan lays
the parameters out, each device receiving only its slice: no device ever holds the whole model, and each
process reads one span of each tensor, the bytes from the first element its devices hold to the last (all
of it where they hold every part, a band where they hold a band of rows).

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.hf.export import export_hf
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> out = export_hf(Llama.init(config, key=jax.random.key(0)), "memory://doc/import/hf")
>>> loaded_config, model = import_hf("memory://doc/import/hf", config)
>>> model.layers.stacked.self_attn.q_proj.weight.axes[0]
Axis(name='layers', size=2)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp

import haliax_lite as hax
from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.config import ModelConfig, RunConfig
from meltemi.trainer.hf.config_map import HfFormatError, model_config_from_hf
from meltemi.trainer.hf.layout import HfTensor, hf_tensors
from meltemi.trainer.hf.safetensors_reader import SafetensorsReader, TensorRegions
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.optimizer import make_optimizer
from meltemi.trainer.step.train_step import TrainState, copy_weights


def read_hf_config(
    directory: str | os.PathLike | Location | Directory, base: ModelConfig | None = None
) -> ModelConfig:
    """The ``ModelConfig`` of a Hugging Face directory's ``config.json`` (other fields from ``base``)."""
    directory = _directory(directory)
    return model_config_from_hf(config_fields(directory), base, where=directory.where("config.json"))


def config_fields(directory: Directory) -> dict:
    """The fields of a Hugging Face directory's ``config.json``; an ``HfFormatError`` when it has none."""
    fields = json_file(directory, "config.json")
    if fields is None:
        raise HfFormatError(f"{directory.where('config.json')}: missing; not a Hugging Face model directory")
    return fields


def json_file(directory: Directory, key: str) -> dict | None:
    """The object in the JSON file ``key`` of ``directory`` (None when there is none); an ``HfFormatError``
    naming it when it holds no JSON object."""
    data = directory.read_bytes(key)
    if data is None:
        return None
    try:
        fields = json.loads(data)
    except ValueError as error:
        raise HfFormatError(f"{directory.where(key)}: not valid JSON ({error})") from None
    if not isinstance(fields, dict):
        raise HfFormatError(f"{directory.where(key)}: holds {type(fields).__name__}, not a JSON object")
    return fields


def _directory(directory: str | os.PathLike | Location | Directory) -> Directory:
    return directory if isinstance(directory, Directory) else Directory(directory)


def check_shapes(table: dict[str, HfTensor], shapes: Mapping[str, tuple[int, ...]], where: str) -> None:
    """An ``HfFormatError`` for the first tensor missing, unexpected, or shaped unlike the config says."""
    for name, tensor in table.items():
        if name not in shapes:
            raise HfFormatError(f"{where}: the tensor {name} (shape {tensor.shape}) is missing")
        if tuple(shapes[name]) != tensor.shape:
            raise HfFormatError(
                f"{where}: the tensor {name} has shape {tuple(shapes[name])}, the config needs {tensor.shape}"
            )
    extra = sorted(set(shapes) - set(table))
    if extra:
        raise HfFormatError(
            f"{where}: the tensor {extra[0]} (shape {tuple(shapes[extra[0]])}) has no place in the config's "
            f"model ({len(extra)} such tensors)"
        )


class _OursFromHf(Mapping[str, TensorRegions]):
    """Our state-dict names mapped onto the checkpoint's tensors, unread: ``from_state_dict`` reads each
    (cast) whole onto one device, or onto a mesh only over the part this process's devices cover."""

    def __init__(self, reader: SafetensorsReader, table: dict[str, HfTensor], dtype: jnp.dtype):
        self.reader, self.dtype = reader, dtype
        self.by_ours = {t.ours: t for t in table.values()}

    def __getitem__(self, ours: str) -> TensorRegions:
        tensor = self.by_ours[ours]
        return tensor.from_hf(self.reader.regions(tensor.name)).astype(self.dtype)

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_ours)

    def __len__(self) -> int:
        return len(self.by_ours)


def import_hf(
    directory: str | os.PathLike | Location | Directory,
    config: ModelConfig | None = None,
    *,
    dtype: str = "float32",
    plan: MeshPlan | None = None,
) -> tuple[ModelConfig, Llama]:
    """``(config, model)`` from a Hugging Face Llama directory (a path or a bucket URL, read in place),
    parameters in ``dtype``.

    With ``config``, the checkpoint must have exactly its model's tensors and shapes (its kernels and
    remat are kept); without, the config is ``config.json``'s. With ``plan``, every parameter is read
    onto the plan's mesh by its parameter mapping, tensor by tensor, each device receiving only its slice;
    without, onto the default device.
    """
    directory = _directory(directory)
    if config is None:
        config = read_hf_config(directory)
    reader = SafetensorsReader(directory)
    table = hf_tensors(config)
    check_shapes(table, reader.shapes, directory.where())
    template = eqx.filter_eval_shape(Llama.init, config, key=jax.random.key(0))
    if plan is not None:
        template = plan.sharded_parameters(template)
    model = hax.state_dict.from_state_dict(template, _OursFromHf(reader, table, jnp.dtype(dtype)))
    return config, model


def train_state_from_hf(
    directory: str | os.PathLike | Location | Directory, config: RunConfig, *, plan: MeshPlan | None = None
) -> TrainState:
    """A step-0 ``TrainState`` whose model is the checkpoint's (in ``trainer.param_dtype``), with a fresh
    optimizer state, to continue pretraining: ``Trainer(config, run_dir).run(state)``.

    With ``plan`` (the trainer's ``MeshPlan``) the state is laid out by its parameter mapping, as the
    trainer's step expects: the parameters are read onto the mesh and the optimizer state is made there.
    """
    _, model = import_hf(directory, config.model, dtype=config.trainer.param_dtype, plan=plan)
    optimizer = make_optimizer(config.optimizer, model)

    def fresh(model: Llama) -> TrainState:  # in one program: every leaf its own buffer (the step donates)
        zero = jnp.zeros((), jnp.int32)
        ema = None if config.optimizer.ema is None else copy_weights(model)  # the average starts from it
        return TrainState(
            step=zero, model=model, opt_state=optimizer.init(model), skipped_steps=zero + 0, ema=ema
        )

    if plan is None:
        return jax.jit(fresh)(model)
    shardings = plan.parameter_shardings(eqx.filter_eval_shape(fresh, model))
    with jax.set_mesh(plan.mesh):
        return jax.jit(fresh, out_shardings=shardings)(model)
