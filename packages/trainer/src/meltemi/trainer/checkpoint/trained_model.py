"""A trained model read back from its run: the latest good checkpoint's parameters sharded over the devices
(each process reading only what its devices hold: no device ever holds the whole model), its config, the
run's own tokenizer (checked against the checkpoint) and its end-of-text token; what export, sampling and
evaluation start from. A run that kept a moving average of its weights (``optimizer.ema``) gives the average
unless its weights as trained are asked for (``weights="raw"``, the apps' ``--weights raw``). A Hugging
Face directory (``config.json``, safetensors, ``tokenizer.json``, and a chat model's template) is read the
same way, so they use a published model as they use a run.

    trained = load_model("runs/tiny")
    trained.model, trained.layout.plan, trained.tokenizer, trained.end_of_text.id
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import jax
import jax.numpy as jnp

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Directory, Location, read_object
from meltemi.trainer.checkpoint.checkpointer import STEP_PREFIX, find_checkpoints, inspect_checkpoint
from meltemi.trainer.checkpoint.format import EMA_PREFIX, MANIFEST, MODEL_PREFIX, Manifest
from meltemi.trainer.checkpoint.locate import checked_location
from meltemi.trainer.checkpoint.restore import restore
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_tokenizer import EndOfText, end_of_text, run_tokenizer
from meltemi.trainer.errors import CheckpointError, HostMemoryError
from meltemi.trainer.hf.layout import hf_tensors
from meltemi.trainer.hf.load import import_hf
from meltemi.trainer.hf.model_files import CONFIG as HF_CONFIG
from meltemi.trainer.hf.model_files import read_model_files
from meltemi.trainer.model.llama import Llama, cast_floating
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step.host_memory import HostMemory
from meltemi.trainer.step.mesh import InferenceLayout, inference_layout

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

logger = logging.getLogger("meltemi.trainer")
Weights = Literal["ema", "raw"]  # a run's moving average of its weights, or its weights as trained


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """A checkpoint's (or a Hugging Face directory's) model and what using it needs: ``layout`` is the mesh
    its parameters lie on (and the axis mappings that run it); ``tokenizer`` where the run's copy lies, a
    path or a URL in the run's bucket (for checkpoints older than the copy, what their config names; None
    without one); ``chat`` a chat run's recipe, its template what a chat renders with (None for a run that
    never saw a conversation);
    ``hugging_face`` whether ``checkpoint`` is a Hugging Face directory rather than a run's checkpoint;
    ``weights`` which of a run's weights ``model`` holds: ``ema``, the moving average it kept
    (``optimizer.ema``), or ``raw``, its weights as trained (a Hugging Face model's are ``raw``)."""

    config: RunConfig
    model: Llama
    layout: InferenceLayout
    checkpoint: Location
    tokenizer: str | None
    end_of_text: EndOfText
    chat: ChatRecipe | None = None
    hugging_face: bool = False
    weights: Weights = "raw"

    def in_dtype(self, dtype: str) -> TrainedModel:
        """The model with its floating-point parameters cast to ``dtype``, computed in it too (each shard
        cast where it lies)."""
        if str(self.model.embed_tokens.weight.dtype) == dtype and self.config.trainer.compute_dtype == dtype:
            return self
        trainer = self.config.trainer.model_copy(update={"param_dtype": dtype, "compute_dtype": dtype})
        config = self.config.model_copy(update={"trainer": trainer})
        return dataclasses.replace(self, config=config, model=cast_floating(self.model, jnp.dtype(dtype)))


def run_of(step: Directory) -> Directory:
    """The run directory a ``step-N`` checkpoint belongs to (``<run>/checkpoints/step-N``).

    >>> run_of(Directory("s3://my-bucket/runs/tiny/checkpoints/step-4")).where()
    's3://my-bucket/runs/tiny'
    """
    location = step.location
    for _ in range(2):
        parent, _, _ = location.path.rpartition("/")
        location = Location(
            location.scheme, location.bucket, parent, str(location).rstrip("/").rpartition("/")[0]
        )
    return Directory(location)


def checkpoint_tokenizer(step: Directory, manifest: Manifest) -> tuple[str | None, EndOfText]:
    """Where the tokenizer of the checkpoint ``step`` lies, and its end-of-text token (a
    ``CheckpointError`` when the run's copy is missing or changed)."""
    if manifest.tokenizer is not None:
        tokenizer = run_tokenizer(run_of(step), manifest.tokenizer)
    else:  # written before runs kept their tokenizer
        tokenizer = manifest.config.get("data", {}).get("tokenizer")
    if manifest.end_of_text is not None:
        return tokenizer, manifest.end_of_text
    return tokenizer, end_of_text(tokenizer if tokenizer is not None and _readable(tokenizer) else None)


EXPORTED = "exported"


def default_export_dir(checkpoint: str) -> str:
    """Where an export goes when none is named: ``exported/`` and the checkpoint's name (its run's directory
    name, with ``-step-N`` for one of the run's checkpoints; a Hub name's last part).

    >>> default_export_dir("runs/tiny"), default_export_dir("s3://b/runs/1b/checkpoints/step-200/")
    ('exported/tiny', 'exported/1b-step-200')
    """
    parts = [part for part in checkpoint.split("/") if part and part != "."]
    name = parts[-1] if parts else "model"
    step = name.removeprefix(STEP_PREFIX)
    if step != name and step.isdigit() and len(parts) >= 3 and parts[-2] == RunDirectory.CHECKPOINTS:
        name = f"{parts[-3]}-{name}"
    return f"{EXPORTED}/{name}"


def _readable(location: str) -> bool:
    try:
        return read_object(location) is not None
    except StorageError:  # a path an old config named, not a location here
        return False


def locate_model(location: str | os.PathLike | Location) -> list[Directory] | Directory:
    """The checkpoints a run or ``step-N`` directory holds, newest first, or the Hugging Face directory that
    ``location`` is (``config.json`` and no checkpoint); a ``CheckpointError`` saying the location does not
    exist (``checked_location``, which an app asks before importing this module), or holds neither (reading
    only listings).

    ``location`` may name a Hugging Face model in this machine's Hub cache (``Qwen/Qwen3-0.6B``, as
    transformers names one; ``datastore.hub_cache``) when no path of that name is here.

    >>> locate_model("/no/such/run")
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.CheckpointError: /no/such/run does not exist
    """
    location = checked_location(location)
    found = find_checkpoints(location)
    if found:
        return found
    directory = Directory(location)
    if directory.exists(HF_CONFIG):
        return directory
    raise CheckpointError(
        f"{location} holds no checkpoint (looked for step-N directories) and is no Hugging Face model "
        f"(no {HF_CONFIG}){Location.parse(location).found_empty_note}"
    )


def abstract_model(config: RunConfig) -> Llama:
    """The shapes and dtypes of ``config``'s model as its checkpoints hold it (nothing allocated)."""
    import equinox as eqx

    return eqx.filter_eval_shape(Llama.init, config.model, key=jax.random.key(0))


def load_model(
    location: str | os.PathLike | Location,
    warn: Callable[[str], object] = logger.warning,
    devices: Sequence[jax.Device] | None = None,
    dtype: str | None = None,
    weights: Weights | None = None,
) -> TrainedModel:
    """The model of a run directory's latest good checkpoint, of a ``step-N`` directory or of a Hugging Face
    directory (a local path or a bucket URL), restored onto ``devices`` (default: all) as
    ``inference_layout`` lays it out; in ``dtype`` when given (parameters and computation), else in the
    run's dtypes (a Hugging Face model's ``torch_dtype``). ``weights``: ``ema`` the moving average of the
    weights the run kept (``optimizer.ema``), ``raw`` its weights as trained; by default the average when
    the checkpoint holds one.

    A location without any checkpoint is a ``CheckpointError`` naming it, and so is ``weights="ema"`` for a
    model without an average; damaged checkpoints are skipped with a warning, as a resumption skips them.
    """
    from meltemi.trainer.config_io import validate

    if weights not in (None, "ema", "raw"):
        raise ValueError(f"weights {weights!r}: ema or raw")
    found = locate_model(location)
    if isinstance(found, Directory):
        if weights == "ema":
            raise CheckpointError(no_average(location, "a Hugging Face model holds one set of weights"))
        return _hf_model(found, devices, dtype)
    for path in found:
        try:
            manifest = inspect_checkpoint(path)
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            continue
        if weights == "ema" and not manifest.has_ema:
            why = f"its checkpoint {path.location.name} kept none: optimizer.ema was off"
            raise CheckpointError(no_average(location, why))
        chosen: Weights = "raw" if weights == "raw" or not manifest.has_ema else "ema"
        try:
            config = validate(manifest.config, where=path.where(MANIFEST), recorded=True)
            layout = inference_layout(config, devices)
            abstract = abstract_model(config)
            count = sum(leaf.size for leaf in jax.tree.leaves(abstract) if hasattr(leaf, "dtype"))
            check_host_memory(count, config.trainer.param_dtype, layout, path.where())
            prefix = EMA_PREFIX if chosen == "ema" else MODEL_PREFIX
            model = restore(
                path, manifest, abstract, layout.plan.parameter_shardings(abstract), prefix=prefix
            )
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            continue
        tokenizer, end = checkpoint_tokenizer(path, manifest)
        trained = TrainedModel(
            config, model, layout, path.location, tokenizer, end, manifest.chat, weights=chosen
        )
        return trained if dtype is None else trained.in_dtype(dtype)
    raise CheckpointError(f"{location}: no checkpoint there reads back whole")


def no_average(location: str | os.PathLike | Location, why: str) -> str:
    """What refusing the EMA weights of a model without them says.

    >>> no_average("runs/tiny", "its checkpoint step-6 kept none: optimizer.ema was off")
    'runs/tiny has no EMA weights (its checkpoint step-6 kept none: optimizer.ema was off); --weights raw \
reads its weights as trained'
    """
    return f"{location} has no EMA weights ({why}); --weights raw reads its weights as trained"


def check_host_memory(
    parameters: int, dtype: str, layout: InferenceLayout, where: str, remedy: str = ""
) -> None:
    """On a CPU, refuse to load a model of ``parameters`` held in ``dtype`` when they are larger than the
    memory this machine has: a ``HostMemoryError`` naming ``where``, instead of a process the system kills
    while it reads them."""
    if layout.plan.mesh.devices.flat[0].platform != "cpu" or (memory := HostMemory.now()) is None:
        return
    size = parameters * jnp.dtype(dtype).itemsize
    shortfall = memory.shortfall(size, 1, f"the model ({parameters:,} parameters in {dtype})")
    if shortfall is not None:
        raise HostMemoryError(f"{where}: {shortfall}: loading it would be killed{remedy}")


def _hf_model(directory: Directory, devices: Sequence[jax.Device] | None, dtype: str | None) -> TrainedModel:
    """A Hugging Face directory's model, in ``dtype`` or else the dtype its weights were saved in
    (``torch_dtype``: what transformers' ``torch_dtype="auto"`` loads), which its matmuls compute in too
    (each tensor read straight into it); the rest of its config is the defaults (its rows no longer than its
    positions)."""
    files = read_model_files(directory)
    dtype = dtype or files.dtype
    trainer = {"param_dtype": dtype, "compute_dtype": dtype}
    data = {"seq_len": min(RunConfig().data.seq_len, files.model.max_seq_len)}
    config = RunConfig.model_validate({"model": files.model.model_dump(), "trainer": trainer, "data": data})
    layout = inference_layout(config, devices)
    smaller = " (--dtype bfloat16 holds it in half)" if dtype == "float32" else ""
    count = sum(math.prod(tensor.shape) for tensor in hf_tensors(config.model).values())  # no tracing
    check_host_memory(count, dtype, layout, str(directory.location), smaller)
    _, model = import_hf(directory, config.model, dtype=dtype, plan=layout.plan)
    where, chat = directory.location, files.chat
    return TrainedModel(
        config, model, layout, where, files.tokenizer, files.end_of_text, chat, hugging_face=True
    )
