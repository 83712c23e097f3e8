"""Flash attention for packed documents on Mosaic GPU, the Pallas GPU backend JAX keeps (Hopper's TMA
and wgmma).

The forward pass runs one program per (query head, query block, batch row), one warpgroup each. It copies
its query tile and their segment ids into shared memory, then streams key/value blocks through two buffers
by TMA, fetching block ``j + 1`` while it computes block ``j``, with an online softmax in float32
registers. It visits only the key blocks the mask leaves visible: causal and window bounds from the
block's position, document bounds from ``segment_block_ranges``, so the work on rows of packed documents
shrinks with their number; the blocks visible whole skip the mask. The backward pass runs the Pallas
kernels of ``attention_pallas`` (Triton's backend) on the forward's output and normalizer.

Off a GPU, ``MosaicAttentionConfig(interpret=...)`` takes Mosaic GPU's interpreter parameters
(``jax.experimental.pallas.mosaic_gpu.InterpretGPUParams`` from JAX 0.11 on) and runs the same kernel on
the CPU. That interpreter has no register layouts, no transposed or register operands for wgmma and no
dynamic indexing of shared memory, so there the kernel reads whole buffers and multiplies tiles with
``lax.dot_general`` (``_Interpreted``); the GPU's operations (``_Hardware``) differ only in those few
places, and ``jax.export`` for ``platforms=["cuda"]`` lowers them on any machine, which the tests do.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from meltemi.kernels._blocking import pad_axis, pad_sequence, round_up
from meltemi.kernels._masking import (
    allowed_pairs,
    key_block_range,
    segment_block_ranges,
    whole_key_block_range,
)
from meltemi.kernels.attention_pallas import PallasAttentionConfig, pallas_backward
from meltemi.kernels.mask_spec import MaskSpec

MOSAIC_DTYPES = (jnp.bfloat16, jnp.float16)
MOSAIC_MAX_HEAD_DIM = 256
WGMMA_ROWS = 64
"""A warpgroup's matrix multiply takes 64 rows at a time: tiles are whole multiples of it."""

_TILE = plgpu.Layout.WGMMA
_ROW = plgpu.Layout.WGMMA.reduce(1)  # one value per row of a tile
_COLUMN = plgpu.Layout.WGMMA.reduce(0)  # one value per column of a tile
_SWIZZLE_BYTES = 128
_LOG2E = math.log2(math.e)


@dataclasses.dataclass(frozen=True)
class MosaicAttentionConfig:
    """Forward tiles (multiples of 64; a ``ValueError`` names any other), the backward's Pallas settings,
    and ``interpret``: ``None`` to compile for the GPU, or Mosaic GPU's interpreter parameters."""

    block_q: int = 64
    block_k: int = 64
    backward: PallasAttentionConfig = PallasAttentionConfig()
    interpret: Any = None

    def __post_init__(self) -> None:
        for name in ("block_q", "block_k"):
            size = getattr(self, name)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1 or size % WGMMA_ROWS:
                raise ValueError(
                    f"MosaicAttentionConfig: {name} must be a positive multiple of {WGMMA_ROWS}, got {size!r}"
                )


def mosaic_unsupported_reason(q: jax.Array) -> str | None:
    """Why the Mosaic kernel cannot run ``q``'s dtype and head size, or ``None`` when it can.

    >>> import jax.numpy as jnp
    >>> mosaic_unsupported_reason(jnp.zeros((1, 8, 2, 64), jnp.float32))
    'the Mosaic GPU kernel needs bfloat16 or float16, got float32'
    """
    if q.dtype not in MOSAIC_DTYPES:
        return f"the Mosaic GPU kernel needs bfloat16 or float16, got {q.dtype}"
    if q.shape[-1] > MOSAIC_MAX_HEAD_DIM:
        return f"the Mosaic GPU kernel needs head_dim at most {MOSAIC_MAX_HEAD_DIM}, got {q.shape[-1]}"
    return None


@dataclasses.dataclass(frozen=True)
class _Plan:
    spec: MaskSpec
    seq_len: int
    padded_len: int
    head_dim: int
    group: int
    block_q: int
    block_k: int
    config: MosaicAttentionConfig

    @property
    def key_limit(self) -> int | None:
        return self.seq_len if self.padded_len != self.seq_len else None


def mosaic_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    spec: MaskSpec,
    config: MosaicAttentionConfig = MosaicAttentionConfig(),
) -> jax.Array:
    """Flash attention with a Mosaic GPU forward pass, same contract as ``reference_attention``;
    differentiable (custom VJP). Needs bfloat16 or float16 (``mosaic_unsupported_reason``).

    >>> import jax, jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jax.ShapeDtypeStruct((1, 128, 2, 64), jnp.bfloat16)
    >>> run = jax.jit(lambda x: mosaic_attention(x, x, x, None, MaskSpec(True, None, 0.125)))
    >>> "mosaic_gpu" in jax.export.export(run, platforms=["cuda"])(x).mlir_module()
    True
    """
    why_not = mosaic_unsupported_reason(q)
    if why_not is not None:
        raise ValueError(f"mosaic_attention: {why_not}")
    batch, seq, heads, head_dim = q.shape
    backward = config.backward
    padded = round_up(
        seq, math.lcm(config.block_q, config.block_k, backward.backward_block_q, backward.backward_block_k)
    )
    padded_dim = max(WGMMA_ROWS, pl.next_power_of_2(head_dim))
    plan = _Plan(spec, seq, padded, padded_dim, heads // k.shape[2], config.block_q, config.block_k, config)
    if segment_ids is None:
        segment_ids = jnp.zeros((batch, seq), jnp.int32)
    q, k, v, segment_ids = pad_sequence(q, k, v, segment_ids, padded)
    q, k, v = (pad_axis(x, padded_dim, axis=3) for x in (q, k, v))
    out = _attend(plan, q, k, v, segment_ids)
    return out[:, :seq, :, :head_dim]


class _Hardware:
    """The kernel's operations on a GPU: swizzled tiles, register layouts, wgmma."""

    @staticmethod
    def tile_buffer(shape: tuple[int, ...], dtype) -> Any:
        elements = _SWIZZLE_BYTES // jnp.dtype(dtype).itemsize
        transforms = (plgpu.TilingTransform((8, elements)), plgpu.SwizzleTransform(_SWIZZLE_BYTES))
        return plgpu.SMEM(shape, dtype, transforms=transforms)

    @staticmethod
    def layout(x: jax.Array, layout) -> jax.Array:
        return plgpu.layout_cast(x, layout)

    @staticmethod
    def positions(shape: tuple[int, int], axis: int) -> jax.Array:
        return plgpu.broadcasted_iota(jnp.int32, shape, axis, layout=_TILE)

    @staticmethod
    def vector(ref, slot, layout) -> jax.Array:
        return plgpu.load(ref if slot is None else ref.at[slot], (), layout=layout)

    @staticmethod
    def scores(q_smem, k_smem, slot, shape: tuple[int, int]) -> jax.Array:
        """``q @ k[slot].T`` in float32."""

        def multiply(acc):
            plgpu.wgmma(acc, q_smem, plgpu.transpose_ref(k_smem.at[slot], (1, 0)))
            return acc[...]

        return pl.run_scoped(multiply, plgpu.ACC(shape, jnp.float32))

    @staticmethod
    def weighted_values(weights: jax.Array, v_smem, slot, shape: tuple[int, int]) -> jax.Array:
        """``weights @ v[slot]`` in float32, ``weights`` in registers."""

        def multiply(acc):
            plgpu.wgmma(acc, weights, v_smem.at[slot])
            return acc[...]

        return pl.run_scoped(multiply, plgpu.ACC(shape, jnp.float32))


class _Interpreted:
    """The same operations in Mosaic GPU's interpreter: plain buffers, whole reads, ``dot_general``."""

    @staticmethod
    def tile_buffer(shape: tuple[int, ...], dtype) -> Any:
        return plgpu.SMEM(shape, dtype)

    @staticmethod
    def layout(x: jax.Array, layout) -> jax.Array:
        return x

    @staticmethod
    def positions(shape: tuple[int, int], axis: int) -> jax.Array:
        return lax.broadcasted_iota(jnp.int32, shape, axis)

    @staticmethod
    def vector(ref, slot, layout) -> jax.Array:
        whole = ref[...]
        return whole if slot is None else lax.dynamic_index_in_dim(whole, slot, keepdims=False)

    @staticmethod
    def scores(q_smem, k_smem, slot, shape: tuple[int, int]) -> jax.Array:
        k = lax.dynamic_index_in_dim(k_smem[...], slot, keepdims=False)
        return lax.dot_general(q_smem[...], k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)

    @staticmethod
    def weighted_values(weights: jax.Array, v_smem, slot, shape: tuple[int, int]) -> jax.Array:
        v = lax.dynamic_index_in_dim(v_smem[...], slot, keepdims=False)
        return lax.dot_general(weights, v, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _operations(config: MosaicAttentionConfig) -> type[_Hardware] | type[_Interpreted]:
    return _Hardware if config.interpret is None else _Interpreted


def _key_loop_bounds(plan: _Plan, q_block, document_range) -> tuple[Any, Any, Any, Any]:
    """``lo <= whole_lo <= whole_hi <= hi``: query block ``q_block`` visits key blocks ``[lo, hi)``, and
    sees ``[whole_lo, whole_hi)`` whole (by position and by document)."""
    mask = {"causal": plan.spec.causal, "sliding_window": plan.spec.sliding_window}
    blocks = plan.padded_len // plan.block_k
    visible = key_block_range(q_block, plan.block_q, plan.block_k, blocks, **mask)
    whole = whole_key_block_range(q_block, plan.block_q, plan.block_k, blocks, **mask, seq_len=plan.key_limit)
    first, end, whole_first, whole_end = document_range
    lo = jnp.maximum(visible[0], first)
    hi = jnp.maximum(lo, jnp.minimum(visible[1], end))
    whole_lo = jnp.minimum(jnp.maximum(jnp.maximum(whole[0], whole_first), lo), hi)
    whole_hi = jnp.minimum(jnp.maximum(jnp.minimum(whole[1], whole_end), whole_lo), hi)
    return lo, whole_lo, whole_hi, hi


def _forward_kernel(
    plan: _Plan,
    q_gmem,
    k_gmem,
    v_gmem,
    segment_gmem,
    range_gmem,
    out_gmem,
    lse_gmem,
    q_smem,
    k_smem,
    v_smem,
    q_segment_smem,
    k_segment_smem,
    lse_smem,
    q_barrier,
    kv_barriers,
):
    ops = _operations(plan.config)
    bq, bk, dim = plan.block_q, plan.block_k, plan.head_dim
    head, q_block, row = lax.axis_index("heads"), lax.axis_index("q_blocks"), lax.axis_index("batch")
    kv_head = lax.div(head, jnp.int32(plan.group))
    q_start = q_block * bq
    queries = pl.ds(q_start, bq)
    plgpu.copy_gmem_to_smem(q_gmem.at[row, queries, head], q_smem, q_barrier)
    plgpu.copy_gmem_to_smem(segment_gmem.at[row, queries], q_segment_smem, q_barrier)

    def fetch(j, slot):
        keys = pl.ds(j * bk, bk)
        barrier = kv_barriers.at[slot]
        plgpu.copy_gmem_to_smem(k_gmem.at[row, keys, kv_head], k_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(v_gmem.at[row, keys, kv_head], v_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(segment_gmem.at[row, keys], k_segment_smem.at[slot], barrier)

    document_range = [range_gmem[row, q_block, corner] for corner in range(4)]
    lo, whole_lo, whole_hi, hi = _key_loop_bounds(plan, q_block, document_range)
    pl.when(lo < hi)(lambda: fetch(lo, 0))
    plgpu.barrier_wait(q_barrier)
    q_segments = lax.broadcast_in_dim(ops.vector(q_segment_smem, None, _ROW), (bq, bk), [0])
    q_positions = ops.positions((bq, bk), 0) + q_start
    scale = plan.spec.softmax_scale * _LOG2E  # scores in base 2: exp2 is one instruction

    def step(j, carry, masked: bool):
        acc, row_max, normalizer = carry
        slot = lax.rem(j - lo, 2)
        pl.when(j + 1 < hi)(lambda: fetch(j + 1, 1 - slot))
        plgpu.barrier_wait(kv_barriers.at[slot])
        scores = ops.scores(q_smem, k_smem, slot, (bq, bk)) * scale
        if masked:
            k_segments = lax.broadcast_in_dim(ops.vector(k_segment_smem, slot, _COLUMN), (bq, bk), [1])
            k_positions = ops.positions((bq, bk), 1) + j * bk
            visible = allowed_pairs(
                q_positions,
                k_positions,
                q_segments,
                k_segments,
                causal=plan.spec.causal,
                sliding_window=plan.spec.sliding_window,
                seq_len=plan.key_limit,
            )
            scores = jnp.where(visible, scores, -jnp.inf)
        new_max = jnp.maximum(row_max, scores.max(axis=1))
        shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        rescale = jnp.exp2(row_max - shift)
        weights = jnp.exp2(scores - lax.broadcast_in_dim(shift, (bq, bk), [0]))
        normalizer = normalizer * rescale + weights.sum(axis=1)
        values = ops.weighted_values(weights.astype(q_smem.dtype), v_smem, slot, (bq, dim))
        acc = acc * lax.broadcast_in_dim(rescale, (bq, dim), [0]) + values
        return acc, new_max, normalizer

    carry = (
        ops.layout(jnp.zeros((bq, dim), jnp.float32), _TILE),
        ops.layout(jnp.full((bq,), -jnp.inf, jnp.float32), _ROW),
        ops.layout(jnp.zeros((bq,), jnp.float32), _ROW),
    )
    carry = lax.fori_loop(lo, whole_lo, functools.partial(step, masked=True), carry)
    carry = lax.fori_loop(whole_lo, whole_hi, functools.partial(step, masked=False), carry)
    acc, row_max, normalizer = lax.fori_loop(whole_hi, hi, functools.partial(step, masked=True), carry)

    nonempty = normalizer > 0
    safe = jnp.where(nonempty, normalizer, 1.0)
    q_smem[...] = (acc / lax.broadcast_in_dim(safe, (bq, dim), [0])).astype(q_smem.dtype)
    lse_smem[...] = jnp.where(nonempty, row_max / _LOG2E + jnp.log(safe), jnp.inf)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(q_smem, out_gmem.at[row, queries, head])
    plgpu.copy_smem_to_gmem(lse_smem, lse_gmem.at[row, head, queries])
    plgpu.wait_smem_to_gmem(0)


def _forward(plan: _Plan, q, k, v, segment_ids):
    batch, padded, heads, dim = q.shape
    bq, bk = plan.block_q, plan.block_k
    ops = _operations(plan.config)
    run = plgpu.kernel(
        functools.partial(_forward_kernel, plan),
        out_type=(
            jax.ShapeDtypeStruct(q.shape, q.dtype),
            jax.ShapeDtypeStruct((batch, heads, padded), jnp.float32),
        ),
        grid=(heads, padded // bq, batch),
        grid_names=("heads", "q_blocks", "batch"),
        scratch_types=[
            ops.tile_buffer((bq, dim), q.dtype),
            ops.tile_buffer((2, bk, dim), q.dtype),
            ops.tile_buffer((2, bk, dim), q.dtype),
            plgpu.SMEM((bq,), jnp.int32),
            plgpu.SMEM((2, bk), jnp.int32),
            plgpu.SMEM((bq,), jnp.float32),
            plgpu.Barrier(num_arrivals=2),
            plgpu.Barrier(num_arrivals=3, num_barriers=2),
        ],
        compiler_params=plgpu.CompilerParams(approx_math=True),
        interpret=plan.config.interpret,
    )
    return run(q, k, v, segment_ids, segment_block_ranges(segment_ids, bq, bk))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(plan: _Plan, q, k, v, segment_ids):
    return _forward(plan, q, k, v, segment_ids)[0]


def _attend_fwd(plan: _Plan, q, k, v, segment_ids):
    out, lse = _forward(plan, q, k, v, segment_ids)
    return out, (q, k, v, segment_ids, out, lse)


def _attend_bwd(plan: _Plan, residuals, d_out):
    q, k, v, segment_ids, out, lse = residuals
    settings = {"spec": plan.spec, "seq_len": plan.seq_len, "config": plan.config.backward}
    gradients = pallas_backward(q, k, v, segment_ids, out, lse, d_out, **settings)
    return (*gradients, None)


_attend.defvjp(_attend_fwd, _attend_bwd)
