"""Which keys a query may attend to, shared by every attention implementation.

One definition of the mask keeps the reference, the blockwise XLA version and the Pallas kernels in
agreement. Positions are token indices within a sequence; a query at position ``i`` may see a key at ``j``
when all of these hold:

- causal: ``j <= i``;
- sliding window ``w``: ``i - w < j`` (causal) or ``|i - j| < w`` (not causal);
- segments: both tokens carry the same segment id, and it is not negative (negative ids mark padding,
  which attends to nothing and is seen by nothing);
- the key lies inside the true sequence (``j < seq_len``), since blocked versions pad the sequence.

The block-range helpers bound the loops of blocked implementations to the blocks that can hold a visible
pair; they use ``lax`` integer ops so they also run inside Pallas kernels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def allowed(
    q_positions: jax.Array,
    k_positions: jax.Array,
    q_segments: jax.Array | None,
    k_segments: jax.Array | None,
    *,
    causal: bool,
    sliding_window: int | None,
    seq_len: int | None = None,
) -> jax.Array:
    """Boolean mask, broadcast from ``q_positions[..., :, None]`` against ``k_positions[..., None, :]``.

    >>> import jax.numpy as jnp
    >>> allowed(jnp.arange(3), jnp.arange(3), None, None, causal=True, sliding_window=2).astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    """
    qi = q_positions[..., :, None]
    kj = k_positions[..., None, :]
    mask = jnp.ones(jnp.broadcast_shapes(qi.shape, kj.shape), dtype=jnp.bool_)
    if causal:
        mask = mask & (kj <= qi)
    if sliding_window is not None:
        mask = mask & (qi - kj < sliding_window)
        if not causal:
            mask = mask & (kj - qi < sliding_window)
    if seq_len is not None:
        mask = mask & (kj < seq_len)
    if q_segments is not None:
        qs = q_segments[..., :, None]
        ks = k_segments[..., None, :]
        mask = mask & (qs == ks) & (qs >= 0)
    return mask


def key_block_range(
    q_block: jax.Array,
    block_q: int,
    block_k: int,
    num_k_blocks: int,
    *,
    causal: bool,
    sliding_window: int | None,
) -> tuple[jax.Array, jax.Array]:
    """The half-open range of key blocks that query block ``q_block`` can see."""
    first_q = q_block * block_q
    last_q = first_q + block_q - 1
    lo = jnp.int32(0)
    hi = jnp.int32(num_k_blocks)
    if sliding_window is not None:
        lo = lax.div(jnp.maximum(first_q - sliding_window + 1, 0), block_k).astype(jnp.int32)
        if not causal:
            hi = jnp.minimum(hi, lax.div(last_q + sliding_window - 1, block_k) + 1).astype(jnp.int32)
    if causal:
        hi = jnp.minimum(hi, lax.div(last_q, block_k) + 1).astype(jnp.int32)
    return lo, hi


def query_block_range(
    k_block: jax.Array,
    block_q: int,
    block_k: int,
    num_q_blocks: int,
    *,
    causal: bool,
    sliding_window: int | None,
) -> tuple[jax.Array, jax.Array]:
    """The half-open range of query blocks that can see key block ``k_block``."""
    first_k = k_block * block_k
    last_k = first_k + block_k - 1
    lo = jnp.int32(0)
    hi = jnp.int32(num_q_blocks)
    if causal:
        lo = lax.div(first_k, block_q).astype(jnp.int32)
    elif sliding_window is not None:
        lo = lax.div(jnp.maximum(first_k - sliding_window + 1, 0), block_q).astype(jnp.int32)
    if sliding_window is not None:
        hi = jnp.minimum(hi, lax.div(last_k + sliding_window - 1, block_q) + 1).astype(jnp.int32)
    return lo, hi
