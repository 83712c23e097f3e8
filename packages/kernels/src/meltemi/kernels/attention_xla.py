"""Flash attention in plain JAX: blocks of queries against blocks of keys, never ``[seq, seq]`` scores.

The forward keeps a running max and normalizer per query (online softmax) and saves only the output and
the log-normalizer; the backward (a custom VJP, FlashAttention-2 style) recomputes each block's
probabilities, so memory stays linear in the sequence. Loops skip blocks the mask hides entirely (causal,
sliding window). Grouped-query attention contracts each key/value head against its group of query heads
without repeating keys.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from meltemi.kernels._blocking import pad_sequence, round_up
from meltemi.kernels._masking import allowed, key_block_range, query_block_range
from meltemi.kernels.mask_spec import MaskSpec

DEFAULT_BLOCK_SIZE = 512


def xla_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    spec: MaskSpec,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> jax.Array:
    """Blockwise attention, same contract as ``reference_attention``; any sequence length.

    >>> import jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jnp.ones((1, 5, 2, 8))
    >>> xla_attention(x, x, x, None, MaskSpec(True, None, 0.35), block_size=2).shape
    (1, 5, 2, 8)
    """
    batch, seq, heads, head_dim = q.shape
    kv_heads = k.shape[2]
    block = min(block_size, seq)
    padded = round_up(seq, block)
    q, k, v, segment_ids = pad_sequence(q, k, v, segment_ids, padded)
    grouped_q = q.reshape(batch, padded, kv_heads, heads // kv_heads, head_dim)
    out = _flash(spec, block, seq, grouped_q, k, v, segment_ids)
    return out.reshape(batch, padded, heads, head_dim)[:, :seq]


def _segment_slice(segment_ids: jax.Array | None, start: jax.Array, size: int) -> jax.Array | None:
    if segment_ids is None:
        return None
    return lax.dynamic_slice_in_dim(segment_ids, start, size, axis=1)[:, None, None, :]


def _block_scores(spec, seq_len, q_block, k_block, q_start, k_start, q_seg, k_seg):
    """Masked scores ``[batch, kv_heads, group, block_q, block_k]`` in float32; hidden pairs are -inf."""
    scores = jnp.einsum("bqhgd,bkhd->bhgqk", q_block, k_block, preferred_element_type=jnp.float32)
    q_pos = q_start + jnp.arange(q_block.shape[1])
    k_pos = k_start + jnp.arange(k_block.shape[1])
    mask = allowed(
        q_pos, k_pos, q_seg, k_seg, causal=spec.causal, sliding_window=spec.sliding_window, seq_len=seq_len
    )
    return jnp.where(mask, scores * spec.softmax_scale, -jnp.inf)


def _forward(spec, block, seq_len, q, k, v, segment_ids):
    batch, padded, kv_heads, group, head_dim = q.shape
    num_blocks = padded // block

    def one_query_block(i):
        q_start = i * block
        q_block = lax.dynamic_slice_in_dim(q, q_start, block, axis=1)
        q_seg = _segment_slice(segment_ids, q_start, block)

        def step(j, carry):
            acc, row_max, normalizer = carry
            k_start = j * block
            k_block = lax.dynamic_slice_in_dim(k, k_start, block, axis=1)
            v_block = lax.dynamic_slice_in_dim(v, k_start, block, axis=1)
            k_seg = _segment_slice(segment_ids, k_start, block)
            scores = _block_scores(spec, seq_len, q_block, k_block, q_start, k_start, q_seg, k_seg)
            new_max = jnp.maximum(row_max, scores.max(axis=-1))
            shift = jnp.where(jnp.isfinite(new_max), new_max, 0.0)
            rescale = jnp.exp(row_max - shift)
            weights = jnp.exp(scores - shift[..., None])
            normalizer = rescale * normalizer + weights.sum(axis=-1)
            update = jnp.einsum(
                "bhgqk,bkhd->bhgqd", weights.astype(v.dtype), v_block, preferred_element_type=jnp.float32
            )
            return rescale[..., None] * acc + update, new_max, normalizer

        stats_shape = (batch, kv_heads, group, block)
        init = (
            jnp.zeros((*stats_shape, head_dim), jnp.float32),
            jnp.full(stats_shape, -jnp.inf, jnp.float32),
            jnp.zeros(stats_shape, jnp.float32),
        )
        lo, hi = key_block_range(
            i, block, block, num_blocks, causal=spec.causal, sliding_window=spec.sliding_window
        )
        acc, row_max, normalizer = lax.fori_loop(lo, hi, step, init)
        nonempty = normalizer > 0
        out = acc / jnp.where(nonempty, normalizer, 1.0)[..., None]
        log_normalizer = jnp.where(nonempty, row_max + jnp.log(jnp.where(nonempty, normalizer, 1.0)), jnp.inf)
        return jnp.einsum("bhgqd->bqhgd", out).astype(q.dtype), log_normalizer

    outs, log_normalizers = lax.map(one_query_block, jnp.arange(num_blocks))
    out = jnp.moveaxis(outs, 0, 1).reshape(q.shape)
    lse = jnp.moveaxis(log_normalizers, 0, 3).reshape(batch, kv_heads, group, padded)
    return out, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _flash(spec, block, seq_len, q, k, v, segment_ids):
    return _forward(spec, block, seq_len, q, k, v, segment_ids)[0]


def _flash_fwd(spec, block, seq_len, q, k, v, segment_ids):
    out, lse = _forward(spec, block, seq_len, q, k, v, segment_ids)
    return out, (q, k, v, segment_ids, out, lse)


def _flash_bwd(spec, block, seq_len, residuals, d_out):
    q, k, v, segment_ids, out, lse = residuals
    padded = q.shape[1]
    num_blocks = padded // block
    d_out = d_out.astype(q.dtype)
    delta = jnp.einsum("bqhgd,bqhgd->bhgq", out.astype(jnp.float32), d_out.astype(jnp.float32))

    def block_gradients(q_start, k_start):
        """Score gradients for one (query block, key block) pair: (probabilities, d_scores)."""
        q_block = lax.dynamic_slice_in_dim(q, q_start, block, axis=1)
        k_block = lax.dynamic_slice_in_dim(k, k_start, block, axis=1)
        v_block = lax.dynamic_slice_in_dim(v, k_start, block, axis=1)
        d_out_block = lax.dynamic_slice_in_dim(d_out, q_start, block, axis=1)
        q_seg = _segment_slice(segment_ids, q_start, block)
        k_seg = _segment_slice(segment_ids, k_start, block)
        scores = _block_scores(spec, seq_len, q_block, k_block, q_start, k_start, q_seg, k_seg)
        lse_block = lax.dynamic_slice_in_dim(lse, q_start, block, axis=3)
        delta_block = lax.dynamic_slice_in_dim(delta, q_start, block, axis=3)
        probabilities = jnp.exp(scores - lse_block[..., None])
        d_prob = jnp.einsum("bqhgd,bkhd->bhgqk", d_out_block, v_block, preferred_element_type=jnp.float32)
        d_scores = probabilities * (d_prob - delta_block[..., None]) * spec.softmax_scale
        return q_block, k_block, d_out_block, probabilities, d_scores

    def one_query_block(i):
        def step(j, dq):
            _, k_block, _, _, d_scores = block_gradients(i * block, j * block)
            return dq + jnp.einsum(
                "bhgqk,bkhd->bqhgd", d_scores.astype(k.dtype), k_block, preferred_element_type=jnp.float32
            )

        lo, hi = key_block_range(
            i, block, block, num_blocks, causal=spec.causal, sliding_window=spec.sliding_window
        )
        zeros = jnp.zeros((q.shape[0], block, *q.shape[2:]), jnp.float32)
        return lax.fori_loop(lo, hi, step, zeros).astype(q.dtype)

    def one_key_block(j):
        def step(i, carry):
            dk, dv = carry
            q_block, _, d_out_block, probabilities, d_scores = block_gradients(i * block, j * block)
            dv = dv + jnp.einsum(
                "bhgqk,bqhgd->bkhd",
                probabilities.astype(v.dtype),
                d_out_block,
                preferred_element_type=jnp.float32,
            )
            dk = dk + jnp.einsum(
                "bhgqk,bqhgd->bkhd", d_scores.astype(q.dtype), q_block, preferred_element_type=jnp.float32
            )
            return dk, dv

        lo, hi = query_block_range(
            j, block, block, num_blocks, causal=spec.causal, sliding_window=spec.sliding_window
        )
        zeros = jnp.zeros((k.shape[0], block, *k.shape[2:]), jnp.float32)
        dk, dv = lax.fori_loop(lo, hi, step, (zeros, zeros))
        return dk.astype(k.dtype), dv.astype(v.dtype)

    dq = jnp.moveaxis(lax.map(one_query_block, jnp.arange(num_blocks)), 0, 1).reshape(q.shape)
    dk, dv = lax.map(one_key_block, jnp.arange(num_blocks))
    dk = jnp.moveaxis(dk, 0, 1).reshape(k.shape)
    dv = jnp.moveaxis(dv, 0, 1).reshape(v.shape)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)
