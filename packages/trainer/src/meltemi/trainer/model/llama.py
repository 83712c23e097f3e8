"""A Llama decoder in haliax-lite: named axes, layers stacked and scanned, names that map to Hugging Face's.

Every parameter's path is its Hugging Face name with the layer index moved into a ``layers`` axis:
``layers.stacked.self_attn.q_proj.weight`` is ``model.layers.{i}.self_attn.q_proj.weight`` for each ``i``.

Axes: ``vocab``, ``embed`` (the residual width), ``mlp``, ``layers``, ``kv_heads``, ``q_heads_per_group``
(query heads sharing one key/value head), ``head_size``; activations add ``batch`` and ``position``.

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, intermediate_dim=64, num_layers=2, num_heads=4,
...                      num_kv_heads=2, attention="reference")
>>> model = Llama.init(config, key=jax.random.key(0))
>>> ids = hax.named(jax.numpy.zeros((1, 8), int), ("batch", "position"))
>>> model.logits(ids, hax.zeros_like(ids)).axes
(Axis(name='batch', size=1), Axis(name='position', size=8), Axis(name='vocab', size=64))
"""

from __future__ import annotations

import dataclasses
import math
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp

import haliax_lite as hax
import haliax_lite.nn as hnn
from haliax_lite import quantization
from meltemi.trainer import adapters
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.model.rotary import apply_rotary, rotary_at, rotary_tables

_Tree = TypeVar("_Tree")

# Values each block may keep for its backward pass under remat "save_dots" (every matmul's output).
DOT_NAMES = ("q", "k", "v", "attention", "attention_out", "gate", "up", "mlp_out")


@dataclasses.dataclass(frozen=True)
class LlamaAxes:
    """The model's named axes, sized from its config."""

    Vocab: hax.Axis
    Embed: hax.Axis
    Mlp: hax.Axis
    Layers: hax.Axis
    KVHeads: hax.Axis
    QHeadsPerGroup: hax.Axis
    HeadSize: hax.Axis

    @staticmethod
    def of(config: ModelConfig) -> LlamaAxes:
        return LlamaAxes(
            Vocab=hax.Axis("vocab", config.vocab_size),
            Embed=hax.Axis("embed", config.hidden_dim),
            Mlp=hax.Axis("mlp", config.intermediate_dim),
            Layers=hax.Axis("layers", config.num_layers),
            KVHeads=hax.Axis("kv_heads", config.num_kv_heads),
            QHeadsPerGroup=hax.Axis("q_heads_per_group", config.num_heads // config.num_kv_heads),
            HeadSize=hax.Axis("head_size", config.head_size),
        )


def remat_policy(remat: str) -> hax.ScanCheckpointPolicy:
    """The named remat policy: ``none`` keeps every activation, ``full`` recomputes each block from its
    input, ``save_dots`` keeps the matmul outputs (``DOT_NAMES``), ``offload`` moves the block inputs to host
    memory where the backend has it (elsewhere it behaves as ``full``).

    >>> remat_policy("save_dots").save_block_internals == DOT_NAMES
    True
    """
    if remat == "none":
        return hax.ScanCheckpointPolicy(disable=True)
    if remat == "full":
        return hax.ScanCheckpointPolicy(save_carries=True, save_inputs=True)
    if remat == "save_dots":
        return hax.ScanCheckpointPolicy(save_block_internals=DOT_NAMES)
    if remat == "offload":
        return hax.ScanCheckpointPolicy.from_bool_or_str("offload")
    raise ValueError(f"model.remat must be none, full, save_dots or offload, got {remat!r}")


def _linear(In, Out, std: float, key) -> hnn.Linear:
    """A bias-free projection, weights ~ N(0, std) truncated at 3 std, stored ``(Out, In)`` as in PyTorch."""
    return hnn.Linear.init(In, Out, key=key, use_bias=False, init_scale=std * math.sqrt(hax.axis_size(In)))


def _tag(x: hax.NamedArray, name: str) -> hax.NamedArray:
    return hax.tree_checkpoint_name(x, name)


class Attention(eqx.Module):
    """Grouped-query self-attention with rotary positions, masked causally and within documents."""

    q_proj: hnn.Linear
    k_proj: hnn.Linear
    v_proj: hnn.Linear
    o_proj: hnn.Linear
    implementation: str = eqx.field(static=True)

    @staticmethod
    def init(config: ModelConfig, *, key: jax.Array) -> Attention:
        a = LlamaAxes.of(config)
        kq, kk, kv, ko = jax.random.split(key, 4)
        std = config.init_std
        return Attention(
            q_proj=_linear(a.Embed, (a.KVHeads, a.QHeadsPerGroup, a.HeadSize), std, kq),
            k_proj=_linear(a.Embed, (a.KVHeads, a.HeadSize), std, kk),
            v_proj=_linear(a.Embed, (a.KVHeads, a.HeadSize), std, kv),
            o_proj=_linear((a.KVHeads, a.QHeadsPerGroup, a.HeadSize), a.Embed, std, ko),
            implementation=config.attention,
        )

    def __call__(self, x: hax.NamedArray, cos, sin, segment_ids: hax.NamedArray) -> hax.NamedArray:
        q = _tag(apply_rotary(self.q_proj(x), cos, sin), "q")
        k = _tag(apply_rotary(self.k_proj(x), cos, sin), "k")
        v = _tag(self.v_proj(x), "v")
        out = _tag(adapters.attention(q, k, v, segment_ids, implementation=self.implementation), "attention")
        return _tag(self.o_proj(out), "attention_out")


class Mlp(eqx.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    gate_proj: hnn.Linear
    up_proj: hnn.Linear
    down_proj: hnn.Linear

    @staticmethod
    def init(config: ModelConfig, *, key: jax.Array) -> Mlp:
        a = LlamaAxes.of(config)
        kg, ku, kd = jax.random.split(key, 3)
        std = config.init_std
        return Mlp(
            _linear(a.Embed, a.Mlp, std, kg),
            _linear(a.Embed, a.Mlp, std, ku),
            _linear(a.Mlp, a.Embed, std, kd),
        )

    def __call__(self, x: hax.NamedArray) -> hax.NamedArray:
        gate = _tag(self.gate_proj(x), "gate")
        up = _tag(self.up_proj(x), "up")
        return _tag(self.down_proj(hnn.silu(gate) * up), "mlp_out")


def _norm(config: ModelConfig, Embed: hax.Axis) -> hnn.RmsNorm:
    return hnn.RmsNorm.init(Embed, eps=config.norm_eps, use_bias=False, dtype=jnp.float32)


class DecoderLayer(eqx.Module):
    """Pre-norm residual block: attention, then the MLP."""

    self_attn: Attention
    mlp: Mlp
    input_layernorm: hnn.RmsNorm
    post_attention_layernorm: hnn.RmsNorm

    @staticmethod
    def init(config: ModelConfig, *, key: jax.Array) -> DecoderLayer:
        Embed = LlamaAxes.of(config).Embed
        ka, km = jax.random.split(key)
        return DecoderLayer(
            Attention.init(config, key=ka),
            Mlp.init(config, key=km),
            _norm(config, Embed),
            _norm(config, Embed),
        )

    def __call__(self, x: hax.NamedArray, cos, sin, segment_ids: hax.NamedArray) -> hax.NamedArray:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, segment_ids)
        return hax.auto_sharded(x + self.mlp(self.post_attention_layernorm(x)))


class Llama(eqx.Module):
    """Token embedding, ``num_layers`` decoder blocks (one ``Stacked`` scan), final norm, unembedding."""

    embed_tokens: hnn.Embedding
    layers: hnn.Stacked[DecoderLayer]
    norm: hnn.RmsNorm
    lm_head: hnn.Linear | None
    config: ModelConfig = eqx.field(static=True)

    @staticmethod
    def init(config: ModelConfig, *, key: jax.Array) -> Llama:
        """Weights ~ N(0, ``init_std``) truncated at 3 std, norm scales 1; ``lm_head`` is None when tied."""
        a = LlamaAxes.of(config)
        k_embed, k_layers, k_head = jax.random.split(key, 3)
        embed_tokens = hnn.Embedding.init(
            a.Vocab, a.Embed, key=k_embed, init_scale=config.init_std * a.Embed.size
        )
        make_layers = hnn.Stacked.init(
            a.Layers, DecoderLayer, gradient_checkpointing=remat_policy(config.remat)
        )
        layers = make_layers(config, key=jax.random.split(k_layers, a.Layers.size))
        lm_head = None if config.tie_embeddings else _linear(a.Embed, a.Vocab, config.init_std, k_head)
        return Llama(embed_tokens, layers, _norm(config, a.Embed), lm_head, config)

    def hidden_states(
        self,
        input_ids: hax.NamedArray,
        segment_ids: hax.NamedArray,
        positions: hax.NamedArray | None = None,
    ) -> hax.NamedArray:
        """The final-norm hidden states ``(batch, position, embed)`` for token ids ``(batch, position)``.

        Attention stays within each segment; ``positions`` (same axes as the ids) are what the rotary
        encoding rotates by: packed documents restart theirs at 0. None: each row counts from its first
        token, as one document does.
        """
        Pos = input_ids.resolve_axis(adapters.POSITION)
        if Pos.size > self.config.max_seq_len:
            raise ValueError(
                f"sequences of {Pos.size} tokens exceed model.max_seq_len ({self.config.max_seq_len})"
            )
        HeadSize = LlamaAxes.of(self.config).HeadSize
        theta, scaling = self.config.rope_theta, self.config.rope_scaling
        if positions is None:
            cos, sin = rotary_tables(Pos, HeadSize, theta=theta, scaling=scaling)
        else:
            cos, sin = rotary_at(positions, HeadSize, theta=theta, scaling=scaling)
        x = hax.auto_sharded(self.embed_tokens.embed(input_ids))
        x = self.layers.fold(x, cos, sin, segment_ids)
        return self.norm(x)

    def unembedding(self) -> hax.NamedArray:
        """The ``(vocab, embed)`` output matrix: ``lm_head``'s, or the embedding's when tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def logits(
        self,
        input_ids: hax.NamedArray,
        segment_ids: hax.NamedArray,
        positions: hax.NamedArray | None = None,
    ) -> hax.NamedArray:
        """Full ``(batch, position, vocab)`` logits in float32 (for evaluation and tests; training never
        materialises them)."""
        hidden = self.hidden_states(input_ids, segment_ids, positions)
        return hax.dot(
            hidden, self.unembedding().astype(hidden.dtype), axis="embed", preferred_element_type=jnp.float32
        )


# The projections fp8 applies to (paths as haliax-lite's quantization matches them): every Linear of the
# decoder blocks; the unembedding (the loss kernels' matmul) and attention's own products stay in compute.
_BLOCK_PROJECTIONS = r"layers\.stacked\..*"


def with_matmul_dtype(model: Llama, matmul_dtype: str) -> Llama:
    """``model`` whose decoder blocks' projections multiply as ``matmul_dtype`` (``model.matmul_dtype``)
    says: unchanged for ``compute``; for ``fp8``, operands rounded through ``float8_e4m3fn`` and output
    gradients through ``float8_e5m2``, each at the scale of its own largest magnitude (haliax-lite's current
    scaling, no state: the parameters, checkpoints and optimizer are the same as in compute).

    >>> config = ModelConfig(vocab_size=16, hidden_dim=8, intermediate_dim=16, num_layers=1, num_heads=2,
    ...                      num_kv_heads=1)
    >>> fp8 = with_matmul_dtype(Llama.init(config, key=jax.random.key(0)), "fp8")
    >>> type(fp8.layers.stacked.mlp.up_proj.dot_general).__name__
    'Fp8CurrentDotGeneralOp'
    """
    if matmul_dtype == "compute":
        return model
    if matmul_dtype != "fp8":
        raise ValueError(f"model.matmul_dtype must be compute or fp8, got {matmul_dtype!r}")
    scaling = quantization.QuantizationConfig(targets=_BLOCK_PROJECTIONS, fp8=True, fp8_scaling="current")
    return quantization.quantize_linear_layers(model, scaling)


def cast_floating(tree: _Tree, dtype: jax.typing.DTypeLike) -> _Tree:
    """``tree`` with every floating-point array cast to ``dtype`` (integer arrays untouched).

    >>> cast_floating({"w": jnp.ones(2), "i": jnp.arange(2)}, jnp.bfloat16)["w"].dtype
    dtype(bfloat16)
    """

    def cast(x):
        return x.astype(dtype) if eqx.is_inexact_array(x) else x

    return jax.tree_util.tree_map(cast, tree)


def parameter_count(model: Llama) -> int:
    """Every parameter, embeddings included (the count Hugging Face reports); abstract models too."""
    return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(model) if hasattr(x, "shape"))
