"""Which Hugging Face tensor each of our parameters is, in which axis order, and its 2-D shape there.

The table is keyed by name (Hugging Face's, with ours in ``HfTensor.ours``), and ``our_tensor`` reads a
parameter by its name, so nothing depends on the order of the table or of the model's fields.

Our parameter paths are Hugging Face's names with the layer index in a ``layers`` axis (see
``meltemi.trainer.model.llama``); haliax-lite's state dict restores the per-layer names. What differs is only
the shape: a projection whose ``Out`` or ``In`` is several axes (query heads: ``kv_heads,
q_heads_per_group, head_size``) is one ``[out, in]`` matrix in PyTorch, flattened in row-major order,
which puts query head ``kv * group + g`` where Hugging Face has it. No permutation is needed (rotary uses
``rotate_half`` in both).

>>> from meltemi.trainer.config import ModelConfig
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> table = hf_tensors(config)
>>> table["model.layers.1.self_attn.k_proj.weight"].shape
(16, 32)
>>> len(table), "lm_head.weight" in table
(21, True)
>>> model = Llama.init(config, key=jax.random.key(0))
>>> sorted(parameter_names(model)) == sorted(t.ours for t in table.values())
True
>>> our_tensor(model, "layers.1.mlp.up_proj.weight").axes
(Axis(name='mlp', size=768), Axis(name='embed', size=32))
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, TypeVar

import jax
import numpy as np

import haliax_lite as hax
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.model.llama import Llama, LlamaAxes

if TYPE_CHECKING:
    from meltemi.trainer.hf.safetensors_reader import TensorRegions

Reshapeable = TypeVar("Reshapeable", np.ndarray, "TensorRegions")

LAYERS = "layers"  # the model's Stacked field, and the name of its layer axis

_IN_LAYER = {
    "self_attn.q_proj.weight": ("kv_heads", "q_heads_per_group", "head_size", "embed"),
    "self_attn.k_proj.weight": ("kv_heads", "head_size", "embed"),
    "self_attn.v_proj.weight": ("kv_heads", "head_size", "embed"),
    "self_attn.o_proj.weight": ("embed", "kv_heads", "q_heads_per_group", "head_size"),
    "mlp.gate_proj.weight": ("mlp", "embed"),
    "mlp.up_proj.weight": ("mlp", "embed"),
    "mlp.down_proj.weight": ("embed", "mlp"),
    "input_layernorm.weight": ("embed",),
    "post_attention_layernorm.weight": ("embed",),
}
# A projection's output axes: they become the matrix's rows, the rest its columns.
_OUT_AXES = {"q_proj": 3, "k_proj": 2, "v_proj": 2, "o_proj": 1, "gate_proj": 1, "up_proj": 1, "down_proj": 1}


@dataclasses.dataclass(frozen=True)
class HfTensor:
    """One tensor of the Hugging Face checkpoint: its name there and ours (``model.`` dropped), our axes
    in the order that flattens to it, and its shape there."""

    name: str
    ours: str
    axes: tuple[hax.Axis, ...]
    shape: tuple[int, ...]

    def to_hf(self, array: hax.NamedArray) -> np.ndarray:
        """Our (per-layer) array as the Hugging Face tensor, on the host (``on_host``)."""
        return on_host(array.rearrange(tuple(a.name for a in self.axes)).array).reshape(self.shape)

    def from_hf(self, array: Reshapeable) -> Reshapeable:
        """The Hugging Face tensor in our axis order (the inverse of ``to_hf``): the same bytes reshaped, so
        an unread ``TensorRegions`` stays unread."""
        return array.reshape(tuple(a.size for a in self.axes))


def on_host(array: jax.Array) -> np.ndarray:
    """``array`` as a host array, leaving no copy of it behind. An array other processes hold parts of is
    gathered from them, so each of them calls this for it too (``hf.export.take_part_in_export``).

    ``np.asarray`` keeps the host value it fetches on an array that lives on an accelerator or on several
    devices (jax caches it, so the next fetch is free): a model's own parameter (the embedding) would then
    hold a host copy as long as the model lives, beside each tensor an export converts next. So each of the
    array's shards is copied onto the CPU device as an array of its own, which is read and dropped: an array
    already whole on the CPU device is read in place, and nothing is left on the parameter.

    >>> on_host(jax.numpy.arange(3.0)).tolist()
    [0.0, 1.0, 2.0]
    """
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # no CPU backend (JAX_PLATFORMS leaves it out): jax's own fetch it is
        return np.asarray(array)
    if not array.is_fully_addressable:  # other processes hold part of it: every process calls this to gather
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(array, tiled=True))
    shards = [shard for shard in array.addressable_shards if shard.replica_id == 0]
    if len(shards) == 1:
        return np.asarray(jax.device_put(shards[0].data, cpu))
    out = np.empty(array.shape, array.dtype)
    for shard in shards:
        out[shard.index] = np.asarray(jax.device_put(shard.data, cpu))
    return out


def _matrix_shape(axes: tuple[hax.Axis, ...], rows: int) -> tuple[int, ...]:
    if len(axes) == 1:
        return (axes[0].size,)
    return (math.prod(a.size for a in axes[:rows]), math.prod(a.size for a in axes[rows:]))


def hf_tensors(config: ModelConfig) -> dict[str, HfTensor]:
    """Every tensor of the checkpoint of ``config``'s model, by Hugging Face name, in our tree's order."""
    axes = LlamaAxes.of(config)
    by_name = {a.name: a for a in (getattr(axes, f.name) for f in dataclasses.fields(axes))}
    table: dict[str, HfTensor] = {}

    def add(name: str, ours: str, names: tuple[str, ...], rows: int = 1) -> None:
        named = tuple(by_name[n] for n in names)
        table[name] = HfTensor(name, ours, named, _matrix_shape(named, rows))

    add("model.embed_tokens.weight", "embed_tokens.weight", ("vocab", "embed"))
    for suffix, names in _IN_LAYER.items():
        rows = _OUT_AXES.get(suffix.split(".")[1], 1)
        for i in range(config.num_layers):
            add(f"model.layers.{i}.{suffix}", f"layers.{i}.{suffix}", names, rows)
    add("model.norm.weight", "norm.weight", ("embed",))
    if not config.tie_embeddings:
        add("lm_head.weight", "lm_head.weight", ("vocab", "embed"))
    return table


def _attribute_names(path) -> list[str]:
    return [str(getattr(key, "name", getattr(key, "key", getattr(key, "idx", key)))) for key in path]


def parameter_names(model: Llama) -> list[str]:
    """Every parameter of ``model`` by its name in our state dict (one per layer for the stacked ones),
    from the model's structure alone: no array is sliced."""
    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(model, is_leaf=hax.is_named_array)[0]:
        parts = _attribute_names(path)
        if parts[:2] == [LAYERS, "stacked"]:
            names += [".".join([LAYERS, str(i), *parts[2:]]) for i in range(model.config.num_layers)]
        else:
            names.append(".".join(parts))
    return names


def our_tensor(model: Llama, name: str) -> hax.NamedArray:
    """Our parameter called ``name`` (``layers.3.mlp.up_proj.weight``: layer 3's slice), found by name."""
    parts = name.split(".")
    stacked = parts[0] == LAYERS
    node: object = model.layers.stacked if stacked else model
    for part in parts[2:] if stacked else parts:
        node = getattr(node, part)
    if not isinstance(node, hax.NamedArray):
        raise AttributeError(f"{name} is not a parameter")
    return node[LAYERS, int(parts[1])] if stacked else node
