"""Validation of attention arguments, turned into the ``MaskSpec`` every implementation takes."""

from __future__ import annotations

import math

import jax

from meltemi.kernels._checks import require, require_floating, require_integer
from meltemi.kernels.mask_spec import MaskSpec, mask_problem

WHERE = "attention"


def check_attention_inputs(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    *,
    causal: bool,
    sliding_window: int | None,
    softmax_scale: float | None,
) -> MaskSpec:
    """Raise a ``BadArgumentsError`` naming the bad argument; return the normalized static settings."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        require(
            x.ndim == 4, WHERE, f"{name} must be [batch, seq, heads, head_dim], got shape {tuple(x.shape)}"
        )
    require_floating(WHERE, q=q, k=k, v=v)
    require(
        q.dtype == k.dtype == v.dtype,
        WHERE,
        f"q, k, v must share a dtype, got {q.dtype}, {k.dtype} and {v.dtype}",
    )
    require(k.shape == v.shape, WHERE, f"k and v must have the same shape, got {k.shape} and {v.shape}")
    batch, seq, heads, head_dim = q.shape
    require(
        (k.shape[0], k.shape[1], k.shape[3]) == (batch, seq, head_dim),
        WHERE,
        f"k/v shape {k.shape} must match q shape {q.shape} in batch, seq and head_dim (self-attention)",
    )
    require(seq > 0 and head_dim > 0, WHERE, f"seq and head_dim must be positive, got q shape {q.shape}")
    require(
        k.shape[2] > 0 and heads % k.shape[2] == 0,
        WHERE,
        f"k/v heads ({k.shape[2]}) must divide q heads ({heads}) for grouped-query attention",
    )
    if segment_ids is not None:
        require(
            segment_ids.shape == (batch, seq),
            WHERE,
            f"segment_ids must be [batch, seq] = {(batch, seq)}, got shape {tuple(segment_ids.shape)}",
        )
        require_integer(WHERE, "segment_ids", segment_ids)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    problem = mask_problem(sliding_window, softmax_scale)
    require(problem is None, WHERE, str(problem))
    return MaskSpec(causal=bool(causal), sliding_window=sliding_window, softmax_scale=float(softmax_scale))
