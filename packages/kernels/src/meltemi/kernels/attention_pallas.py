"""Flash attention as Pallas kernels (Triton backend on GPU; ``interpret=True`` anywhere else).

Three kernels, FlashAttention-2 style. The forward runs one program per (batch, head, query block) and
streams key/value blocks through an online softmax, writing the output and the log-normalizer. The backward
recomputes probabilities block by block: one kernel per key block accumulates dK and dV over the query
blocks that see it, another per query block accumulates dQ. Loops visit only the blocks the mask leaves
visible: causal and sliding-window bounds from the block's position, document bounds from the segment ids
(``segment_block_ranges``, computed before the launch and read by each program as four integers), so the
work on rows of packed documents shrinks with their number. Each loop runs in three parts: the blocks that
are visible whole (below the diagonal, inside the window and the true length, in the block's one document)
skip the mask's arithmetic; only the blocks before and after them compute it.

The wrapper pads the sequence to whole blocks and the head dimension to a power of two (Triton tiles are
powers of two); padded keys are masked by position or segment. Grouped-query attention maps each query
head to its key/value head in the block index maps; the dK/dV kernel runs one program per key/value head and
key block and loops over the query heads of its group, so dK and dV are accumulated in float32 in registers
and written once, in the keys' dtype (no per-query-head float32 copies to sum afterwards).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from meltemi.kernels._blocking import pad_axis, pad_sequence, round_up
from meltemi.kernels._masking import (
    allowed,
    key_block_range,
    query_block_range,
    segment_block_ranges,
    whole_key_block_range,
    whole_query_block_range,
)
from meltemi.kernels._pallas_launch import MIN_TILE, Launcher, check_launch_settings, fit_tile
from meltemi.kernels.mask_spec import MaskSpec


@dataclasses.dataclass(frozen=True)
class PallasAttentionConfig:
    """Tile sizes and launch settings; ``interpret=None`` interprets unless the default backend is a GPU.

    Tiles are powers of two of at least 16 (a ``BadTilingError`` names any other); ``num_warps=None`` and
    ``num_stages=None`` pick them from the head dimension (``launch_settings``).
    """

    block_q: int = 128
    block_k: int = 64
    backward_block_q: int = 64
    backward_block_k: int = 64
    num_warps: int | None = None
    num_stages: int | None = None
    interpret: bool | None = None

    def __post_init__(self) -> None:
        check_launch_settings(
            "PallasAttentionConfig",
            self.num_warps,
            self.num_stages,
            block_q=self.block_q,
            block_k=self.block_k,
            backward_block_q=self.backward_block_q,
            backward_block_k=self.backward_block_k,
        )


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Everything static about one call: the mask, the tiles, the true length and how to launch."""

    spec: MaskSpec
    seq_len: int
    padded_len: int
    group: int
    block_q: int
    block_k: int
    backward_block_q: int
    backward_block_k: int
    has_segments: bool
    launch: Launcher

    @property
    def key_limit(self) -> int | None:
        return self.seq_len if self.padded_len != self.seq_len else None


def pallas_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    spec: MaskSpec,
    config: PallasAttentionConfig = PallasAttentionConfig(),
) -> jax.Array:
    """Pallas flash attention, same contract as ``reference_attention``; differentiable (custom VJP).

    >>> import jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jnp.ones((1, 5, 2, 16))
    >>> pallas_attention(x, x, x, None, MaskSpec(True, None, 0.25)).shape
    (1, 5, 2, 16)
    """
    batch, seq, heads, head_dim = q.shape
    block_q, block_k = fit_tile(config.block_q, seq), fit_tile(config.block_k, seq)
    backward_q, backward_k = fit_tile(config.backward_block_q, seq), fit_tile(config.backward_block_k, seq)
    padded = round_up(seq, max(block_q, block_k, backward_q, backward_k))
    padded_dim = max(MIN_TILE, pl.next_power_of_2(head_dim))
    plan = _Plan(
        spec=spec,
        seq_len=seq,
        padded_len=padded,
        group=heads // k.shape[2],
        block_q=block_q,
        block_k=block_k,
        backward_block_q=backward_q,
        backward_block_k=backward_k,
        has_segments=segment_ids is not None,
        launch=Launcher.resolve(*launch_settings(config, padded_dim), config.interpret),
    )
    q, k, v, segment_ids = pad_sequence(q, k, v, segment_ids, padded)
    q, k, v = (pad_axis(x, padded_dim, axis=3) for x in (q, k, v))
    if segment_ids is None:
        segment_ids = jnp.zeros((batch, padded), jnp.int32)
    out = _flash(plan, q, k, v, segment_ids)
    return out[:, :seq, :, :head_dim]


def launch_settings(config: PallasAttentionConfig, head_dim: int) -> tuple[int, int]:
    """Triton's warps and pipeline stages for heads of ``head_dim``: the config's, or where it leaves them
    ``None``, 4 warps and 3 stages up to 64, else 8 and 2.

    Three stages were measured at the 1B step's shapes (head size 64, 4,096-token rows of ~4 documents, on
    an H200, forward and backward): cuDNN on whole rows took 1.40 times as long as the kernel with three
    stages, 1.29 times with two, and 0.66 times with eight warps; in a second call, 1.44 and 1.39 times.
    Wider heads keep the two stages measured before, which also leave room in a smaller GPU's shared
    memory.

    >>> launch_settings(PallasAttentionConfig(), 64), launch_settings(PallasAttentionConfig(), 128)
    ((4, 3), (8, 2))
    >>> launch_settings(PallasAttentionConfig(num_warps=8, num_stages=2), 64)
    (8, 2)
    """
    narrow = head_dim <= 64
    warps = config.num_warps or (4 if narrow else 8)
    return warps, config.num_stages or (3 if narrow else 2)


def _visible(plan, q_start, k_start, q_size, k_size, q_seg_ref, k_seg_ref):
    q_pos = q_start + jnp.arange(q_size)
    k_pos = k_start + jnp.arange(k_size)
    q_seg = k_seg = None
    if plan.has_segments:
        q_seg = q_seg_ref[pl.ds(q_start, q_size)]
        k_seg = k_seg_ref[pl.ds(k_start, k_size)]
    return allowed(
        q_pos,
        k_pos,
        q_seg,
        k_seg,
        causal=plan.spec.causal,
        sliding_window=plan.spec.sliding_window,
        seq_len=plan.key_limit,
    )


def _three_loops(body, carry, visible: tuple, whole: tuple, range_ref):
    """Run ``body(index, carry, masked)`` over the visible blocks ``[lo, hi)`` narrowed to the documents'
    range: unmasked over those visible whole (by position, ``whole``, and by document), masked over the rest.
    """
    lo = jnp.maximum(visible[0], range_ref[0])
    hi = jnp.maximum(lo, jnp.minimum(visible[1], range_ref[1]))
    whole_lo = jnp.clip(jnp.maximum(whole[0], range_ref[2]), lo, hi)
    whole_hi = jnp.clip(jnp.minimum(whole[1], range_ref[3]), whole_lo, hi)
    carry = lax.fori_loop(lo, whole_lo, functools.partial(body, masked=True), carry)
    carry = lax.fori_loop(whole_lo, whole_hi, functools.partial(body, masked=False), carry)
    return lax.fori_loop(whole_hi, hi, functools.partial(body, masked=True), carry)


# Each program's own row of ``segment_block_ranges``: every grid is (batch, head, block).
_RANGE_SPEC = pl.BlockSpec((None, None, 4), lambda b, h, i: (b, i, 0))


def _matmul(a, b, contract_a: int, contract_b: int):
    return lax.dot_general(
        a, b, (((contract_a,), (contract_b,)), ((), ())), preferred_element_type=jnp.float32
    )


def _key_blocks(plan, q_block, bq: int, bk: int) -> tuple[tuple, tuple]:
    """Query block ``q_block``'s visible key blocks and those visible whole, by position."""
    mask = {"causal": plan.spec.causal, "sliding_window": plan.spec.sliding_window}
    visible = key_block_range(q_block, bq, bk, plan.padded_len // bk, **mask)
    whole = whole_key_block_range(q_block, bq, bk, plan.padded_len // bk, **mask, seq_len=plan.key_limit)
    return visible, whole


def _query_blocks(plan, k_block, bq: int, bk: int) -> tuple[tuple, tuple]:
    """Key block ``k_block``'s query blocks that see some of it and those that see all of it, by position."""
    mask = {"causal": plan.spec.causal, "sliding_window": plan.spec.sliding_window}
    visible = query_block_range(k_block, bq, bk, plan.padded_len // bq, **mask)
    whole = whole_query_block_range(k_block, bq, bk, plan.padded_len // bq, **mask, seq_len=plan.key_limit)
    return visible, whole


def _forward_kernel(plan, q_ref, k_ref, v_ref, seg_ref, range_ref, out_ref, lse_ref):
    bq, bk = plan.block_q, plan.block_k
    q_block = pl.program_id(2)
    q_start = q_block * bq
    q = q_ref[...]

    def step(j, carry, masked: bool):
        acc, row_max, normalizer = carry
        k_start = pl.multiple_of(j * bk, bk)
        k = k_ref[pl.ds(k_start, bk), :]
        v = v_ref[pl.ds(k_start, bk), :]
        scores = _matmul(q, k, 1, 1) * plan.spec.softmax_scale
        if masked:
            visible = _visible(plan, q_start, k_start, bq, bk, seg_ref, seg_ref)
            scores = jnp.where(visible, scores, -jnp.inf)
        new_max = jnp.maximum(row_max, jnp.max(scores, axis=1))
        shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        rescale = jnp.exp(row_max - shift)
        weights = jnp.exp(scores - shift[:, None])
        normalizer = rescale * normalizer + jnp.sum(weights, axis=1)
        acc = rescale[:, None] * acc + _matmul(weights.astype(v.dtype), v, 1, 0)
        return acc, new_max, normalizer

    init = (
        jnp.zeros(q.shape, jnp.float32),
        jnp.full((bq,), -jnp.inf, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
    )
    acc, row_max, normalizer = _three_loops(step, init, *_key_blocks(plan, q_block, bq, bk), range_ref)
    nonempty = normalizer > 0
    safe = jnp.where(nonempty, normalizer, 1.0)
    out_ref[...] = (acc / safe[:, None]).astype(out_ref.dtype)
    lse_ref[...] = jnp.where(nonempty, row_max + jnp.log(safe), jnp.inf)


def _forward(plan: _Plan, q, k, v, segment_ids):
    batch, padded, heads, dim = q.shape
    bq, group = plan.block_q, plan.group
    return plan.launch(
        functools.partial(_forward_kernel, plan),
        grid=(batch, heads, padded // bq),
        in_specs=[
            pl.BlockSpec((None, bq, None, dim), lambda b, h, i: (b, i, h, 0)),
            pl.BlockSpec((None, padded, None, dim), lambda b, h, i: (b, 0, h // group, 0)),
            pl.BlockSpec((None, padded, None, dim), lambda b, h, i: (b, 0, h // group, 0)),
            pl.BlockSpec((None, padded), lambda b, h, i: (b, 0)),
            _RANGE_SPEC,
        ],
        out_specs=[
            pl.BlockSpec((None, bq, None, dim), lambda b, h, i: (b, i, h, 0)),
            pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct((batch, heads, padded), jnp.float32),
        ],
        name="meltemi_flash_forward",
    )(q, k, v, segment_ids, segment_block_ranges(segment_ids, bq, plan.block_k))


def _score_gradients(plan, q, k, v, d_out, lse, delta, visible):
    """Probabilities and score gradients of one tile, recomputed from the saved log-normalizer
    (``visible``: the tile's mask, or None when every pair is visible)."""
    scores = _matmul(q, k, 1, 1) * plan.spec.softmax_scale
    probabilities = jnp.exp(scores - lse[:, None])
    if visible is not None:
        probabilities = jnp.where(visible, probabilities, 0.0)
    d_prob = _matmul(d_out, v, 1, 1)
    d_scores = probabilities * (d_prob - delta[:, None]) * plan.spec.softmax_scale
    return probabilities, d_scores


def _key_value_gradient_kernel(
    plan, q_ref, k_ref, v_ref, seg_ref, range_ref, d_out_ref, lse_ref, delta_ref, dk_ref, dv_ref
):
    """dK and dV of one key block of one key/value head, summed over the query heads that share it."""
    bq, bk = plan.backward_block_q, plan.backward_block_k
    k_block = pl.program_id(2)
    k_start = k_block * bk
    k = k_ref[...]
    v = v_ref[...]
    blocks = _query_blocks(plan, k_block, bq, bk)

    def query_head(head, carry):
        def step(i, carry, masked: bool):
            dk, dv = carry
            q_start = pl.multiple_of(i * bq, bq)
            rows = pl.ds(q_start, bq)
            q = q_ref[rows, head, :]
            d_out = d_out_ref[rows, head, :]
            visible = _visible(plan, q_start, k_start, bq, bk, seg_ref, seg_ref) if masked else None
            probabilities, d_scores = _score_gradients(
                plan, q, k, v, d_out, lse_ref[head, rows], delta_ref[head, rows], visible
            )
            dv = dv + _matmul(probabilities.astype(d_out.dtype), d_out, 0, 0)
            dk = dk + _matmul(d_scores.astype(q.dtype), q, 0, 0)
            return dk, dv

        return _three_loops(step, carry, *blocks, range_ref)

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(0, plan.group, query_head, (zeros, zeros))
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _query_gradient_kernel(
    plan, q_ref, k_ref, v_ref, seg_ref, range_ref, d_out_ref, lse_ref, delta_ref, dq_ref
):
    bq, bk = plan.backward_block_q, plan.backward_block_k
    q_block = pl.program_id(2)
    q_start = q_block * bq
    q = q_ref[...]
    d_out = d_out_ref[...]
    lse = lse_ref[...]
    delta = delta_ref[...]

    def step(j, dq, masked: bool):
        k_start = pl.multiple_of(j * bk, bk)
        k = k_ref[pl.ds(k_start, bk), :]
        v = v_ref[pl.ds(k_start, bk), :]
        visible = _visible(plan, q_start, k_start, bq, bk, seg_ref, seg_ref) if masked else None
        _, d_scores = _score_gradients(plan, q, k, v, d_out, lse, delta, visible)
        return dq + _matmul(d_scores.astype(k.dtype), k, 1, 0)

    dq = _three_loops(step, jnp.zeros(q.shape, jnp.float32), *_key_blocks(plan, q_block, bq, bk), range_ref)
    dq_ref[...] = dq.astype(dq_ref.dtype)


def _backward(plan: _Plan, q, k, v, segment_ids, lse, delta, d_out):
    batch, padded, heads, dim = q.shape
    bq, bk, group = plan.backward_block_q, plan.backward_block_k, plan.group
    segments = pl.BlockSpec((None, padded), lambda b, h, j: (b, 0))
    # dK/dV: one program per key/value head and key block, over every query head of its group.
    group_rows = pl.BlockSpec((None, padded, group, dim), lambda b, h, j: (b, 0, h, 0))
    group_stats = pl.BlockSpec((None, group, padded), lambda b, h, j: (b, h, 0))
    kv_tile = pl.BlockSpec((None, bk, None, dim), lambda b, h, j: (b, j, h, 0))
    dk, dv = plan.launch(
        functools.partial(_key_value_gradient_kernel, plan),
        grid=(batch, k.shape[2], padded // bk),
        in_specs=[group_rows, kv_tile, kv_tile, segments, _RANGE_SPEC, group_rows, group_stats, group_stats],
        out_specs=[kv_tile, kv_tile],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        name="meltemi_flash_backward_kv",
    )(q, k, v, segment_ids, segment_block_ranges(segment_ids, bk, bq), d_out, lse, delta)

    whole_kv = pl.BlockSpec((None, padded, None, dim), lambda b, h, i: (b, 0, h // group, 0))
    q_tile = pl.BlockSpec((None, bq, None, dim), lambda b, h, i: (b, i, h, 0))
    stats_tile = pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i))
    dq = plan.launch(
        functools.partial(_query_gradient_kernel, plan),
        grid=(batch, heads, padded // bq),
        in_specs=[q_tile, whole_kv, whole_kv, segments, _RANGE_SPEC, q_tile, stats_tile, stats_tile],
        out_specs=q_tile,
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        name="meltemi_flash_backward_q",
    )(q, k, v, segment_ids, segment_block_ranges(segment_ids, bq, bk), d_out, lse, delta)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(plan, q, k, v, segment_ids):
    return _forward(plan, q, k, v, segment_ids)[0]


def _flash_fwd(plan, q, k, v, segment_ids):
    out, lse = _forward(plan, q, k, v, segment_ids)
    return out, (q, k, v, segment_ids, out, lse)


def _flash_bwd(plan, residuals, d_out):
    q, k, v, segment_ids, out, lse = residuals
    d_out = d_out.astype(q.dtype)
    delta = jnp.einsum("bqhd,bqhd->bhq", out.astype(jnp.float32), d_out.astype(jnp.float32))
    dq, dk, dv = _backward(plan, q, k, v, segment_ids, lse, delta, d_out)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)
