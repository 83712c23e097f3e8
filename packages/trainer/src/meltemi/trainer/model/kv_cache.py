"""The Llama forward pass over a key/value cache: a prompt fills it (prefill), then one token at a time.

The cache holds every layer's keys and values over ``slot`` (batch, slot, kv_heads, head_size), stacked
over ``layers`` as the model's blocks are. Prompts of a batch are left-padded to one length: row ``b``'s
tokens start at slot ``pad[b]``, its rotary positions count from there, and its queries never see a slot
before it, so each row computes what it would alone. The step reuses the model's own modules
(projections, norms, MLP, rotary), so a cached step and the training forward pass share their weights'
meaning by construction; only attention is written here, against the cache.

>>> import jax, jax.numpy as jnp
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> model = Llama.init(config, key=jax.random.key(0))
>>> Batch = hax.Axis("batch", 2)
>>> cache = KVCache.init(config, Batch, slots=16, dtype=jnp.float32)
>>> ids = hax.named(jnp.ones((2, 5), jnp.int32), ("batch", "position"))
>>> pad = hax.named(jnp.array([0, 2]), ("batch",))
>>> logits, cache = forward_cached(model, ids, jnp.int32(0), pad, cache)
>>> logits.axes
(Axis(name='batch', size=2), Axis(name='vocab', size=64))
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

import haliax_lite as hax
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.model.llama import DecoderLayer, Llama, LlamaAxes
from meltemi.trainer.model.rotary import apply_rotary, rotary_at

SLOT = "slot"


class KVCache(eqx.Module):
    """Keys and values of every layer at every slot written so far: ``(layers, batch, slot, kv_heads,
    head_size)`` each."""

    k: hax.NamedArray
    v: hax.NamedArray

    @staticmethod
    def init(config: ModelConfig, Batch: hax.Axis, *, slots: int, dtype) -> KVCache:
        a = LlamaAxes.of(config)
        axes = (a.Layers, Batch, hax.Axis(SLOT, slots), a.KVHeads, a.HeadSize)
        return KVCache(hax.zeros(axes, dtype=dtype), hax.zeros(axes, dtype=dtype))


def _attend(q: hax.NamedArray, k: hax.NamedArray, v: hax.NamedArray, visible: hax.NamedArray):
    """Softmax attention of ``q`` (batch, position, heads...) over the cache's ``slot`` where ``visible``."""
    scale = 1.0 / math.sqrt(q.resolve_axis("head_size").size)
    scores = hax.dot(q, k, axis="head_size", preferred_element_type=jnp.float32) * scale
    scores = hax.where(visible, scores, jnp.finfo(jnp.float32).min)
    weights = hax.nn.softmax(scores, axis=SLOT).astype(v.dtype)
    return hax.dot(weights, v, axis=SLOT)


def _layer_step(layer: DecoderLayer, x, k_cache, v_cache, cos, sin, start, visible):
    """One decoder block over new positions at slots ``start...``: its output and the updated cache."""
    attn = layer.self_attn
    h = layer.input_layernorm(x)
    q = apply_rotary(attn.q_proj(h), cos, sin)
    new_k = apply_rotary(attn.k_proj(h), cos, sin).rename({"position": SLOT})
    new_v = attn.v_proj(h).rename({"position": SLOT})
    k_cache = hax.updated_slice(k_cache, {SLOT: start}, new_k)
    v_cache = hax.updated_slice(v_cache, {SLOT: start}, new_v)
    x = x + attn.o_proj(_attend(q, k_cache, v_cache, visible))
    x = hax.auto_sharded(x + layer.mlp(layer.post_attention_layernorm(x)))
    return x, (hax.auto_sharded(k_cache), hax.auto_sharded(v_cache))


def forward_cached(
    model: Llama, input_ids: hax.NamedArray, start: jax.Array, pad: hax.NamedArray, cache: KVCache
) -> tuple[hax.NamedArray, KVCache]:
    """Run ``input_ids`` (batch, position) at slots ``start, start + 1, ...`` against ``cache``.

    Returns the float32 logits ``(batch, vocab)`` of the last position (the next token's) and the cache
    with these positions' keys and values written. ``pad`` (batch,) is each row's first slot.
    """
    Pos = input_ids.resolve_axis("position")
    Slot = cache.k.resolve_axis(SLOT)
    Batch = input_ids.resolve_axis("batch")
    slots = hax.arange(Pos) + start
    positions = hax.maximum(slots.broadcast_axis(Batch) - pad, 0)
    config = model.config
    cos, sin = rotary_at(
        positions.rearrange(("batch", "position")),
        LlamaAxes.of(config).HeadSize,
        theta=config.rope_theta,
        scaling=config.rope_scaling,
    )
    key_slots = hax.arange(Slot)
    causal = key_slots.broadcast_axis(Pos) <= slots
    visible = causal.broadcast_axis(Batch) & (key_slots.broadcast_axis(Batch) >= pad)
    x = hax.auto_sharded(model.embed_tokens.embed(input_ids))
    step = model.layers.scan_via(
        lambda layer, carry, k, v: _layer_step(layer, carry, k, v, cos, sin, start, visible)
    )
    x, (k, v) = step(x, cache.k, cache.v)
    last = model.norm(x[Pos.name, Pos.size - 1])
    unembedding = model.unembedding().astype(last.dtype)
    logits = hax.dot(last, unembedding, axis="embed", preferred_element_type=jnp.float32)
    return logits, KVCache(k, v)
