"""The oracle: attention with the full ``[seq, seq]`` score matrix, all statistics in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from meltemi.kernels._masking import allowed
from meltemi.kernels.mask_spec import MaskSpec


def reference_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, spec: MaskSpec
) -> jax.Array:
    """Softmax attention in float32, layout ``[batch, seq, heads, head_dim]``; fully masked rows give 0.

    Memory is quadratic in the sequence: use it to check the other implementations, not to train.

    >>> import jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jnp.ones((1, 4, 2, 8))
    >>> reference_attention(x, x, x, None, MaskSpec(True, None, 0.35)).shape
    (1, 4, 2, 8)
    """
    batch, seq, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    qf = q.astype(jnp.float32).reshape(batch, seq, kv_heads, group, head_dim)
    scores = jnp.einsum("bqhgd,bkhd->bhgqk", qf, k.astype(jnp.float32)) * spec.softmax_scale
    positions = jnp.arange(seq)
    segments = None if segment_ids is None else segment_ids[:, None, None, :]
    mask = allowed(
        positions, positions, segments, segments, causal=spec.causal, sliding_window=spec.sliding_window
    )
    scores = jnp.where(mask, scores, -jnp.inf)
    row_max = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    weights = jnp.exp(scores - row_max)
    normalizer = jnp.sum(weights, axis=-1, keepdims=True)
    probabilities = weights / jnp.where(normalizer > 0, normalizer, 1.0)
    out = jnp.einsum("bhgqk,bkhd->bqhgd", probabilities, v.astype(jnp.float32))
    return out.reshape(batch, seq, heads, head_dim).astype(q.dtype)
