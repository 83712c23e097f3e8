"""Flash attention for packed documents on Mosaic GPU, the Pallas GPU backend JAX keeps (Hopper's TMA
and wgmma).

Three kernels, FlashAttention-2 style, as ``attention_pallas``'s on Triton, each program one warpgroup
over a (head, block, batch row) grid. The forward copies its query tile and their segment ids into shared
memory, then streams key/value blocks through ``stages`` buffers by TMA (2 by default: block ``j + 1``
is fetched while block ``j`` is computed), with an online softmax in float32 registers; it writes the
output and the log-normalizer. The backward recomputes probabilities block by block: one kernel per key
block streams the query tiles (and their output gradients and statistics) of every query head of its group
that sees it and accumulates dK and dV, another per query block streams key tiles and accumulates dQ. Every
loop visits only the blocks the mask leaves visible: causal and window bounds from the block's position,
document bounds from ``segment_block_ranges``, so the work on rows of packed documents shrinks with their
number; the blocks visible whole skip the mask.

Off a GPU, ``MosaicAttentionConfig(interpret=...)`` takes Mosaic GPU's interpreter parameters
(``jax.experimental.pallas.mosaic_gpu.InterpretGPUParams`` from JAX 0.11 on) and runs the same kernels on
the CPU. That interpreter has no register layouts, no transposed or register operands for wgmma and no
dynamic indexing of shared memory, so there the kernels read whole buffers and multiply tiles with
``lax.dot_general`` (``_Interpreted``); the GPU's operations (``_Hardware``) differ only in those few
places, and lowering for ``cuda`` builds them on any machine, which the tests do.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
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
    query_block_range,
    segment_block_ranges,
    whole_key_block_range,
    whole_query_block_range,
)
from meltemi.kernels.errors import BadTilingError, UnsupportedError
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
    """Tiles of the forward and backward passes (multiples of 64; a ``BadTilingError`` names any other), how
    many buffers each stream of tiles cycles through (``stages``: tiles fetched ``stages - 1`` ahead), and
    ``interpret``: ``None`` to compile for the GPU, or Mosaic GPU's interpreter parameters."""

    block_q: int = 64
    block_k: int = 64
    backward_block_q: int = 64
    backward_block_k: int = 64
    stages: int = 2
    interpret: Any = None

    def __post_init__(self) -> None:
        for name in ("block_q", "block_k", "backward_block_q", "backward_block_k"):
            size = getattr(self, name)
            if not isinstance(size, int) or isinstance(size, bool) or size < 1 or size % WGMMA_ROWS:
                raise BadTilingError(
                    f"MosaicAttentionConfig: {name} must be a positive multiple of {WGMMA_ROWS}, got {size!r}"
                )
        if not isinstance(self.stages, int) or isinstance(self.stages, bool) or self.stages < 2:
            raise BadTilingError(f"MosaicAttentionConfig: stages must be an int >= 2, got {self.stages!r}")


def mosaic_unsupported_reason(
    q: jax.Array, *, platform: str | None = None, compute_capability: str | None = None
) -> str | None:
    """Why the Mosaic kernels cannot run ``q``'s dtype and head size (on ``platform``, a GPU of
    ``compute_capability``, where given), or ``None`` when they can.

    >>> import jax.numpy as jnp
    >>> mosaic_unsupported_reason(jnp.zeros((1, 8, 2, 64), jnp.float32))
    'the Mosaic GPU kernel needs bfloat16 or float16, got float32'
    >>> bf16 = jnp.zeros((1, 8, 2, 64), jnp.bfloat16)
    >>> mosaic_unsupported_reason(bf16, platform="cuda", compute_capability="8.0")
    "the Mosaic GPU kernel is written for Hopper GPUs (compute capability 9.x: wgmma), this GPU's is 8.0"
    """
    if q.dtype not in MOSAIC_DTYPES:
        return f"the Mosaic GPU kernel needs bfloat16 or float16, got {q.dtype}"
    if q.shape[-1] > MOSAIC_MAX_HEAD_DIM:
        return f"the Mosaic GPU kernel needs head_dim at most {MOSAIC_MAX_HEAD_DIM}, got {q.shape[-1]}"
    if platform is not None and platform != "cuda":
        return f"the Mosaic GPU kernel runs on an NVIDIA GPU (Hopper), and JAX's backend here is {platform!r}"
    if compute_capability is not None and not compute_capability.startswith("9."):
        return (
            "the Mosaic GPU kernel is written for Hopper GPUs (compute capability 9.x: wgmma), this GPU's is "
            f"{compute_capability}"
        )
    return None


@dataclasses.dataclass(frozen=True)
class _Plan:
    spec: MaskSpec
    seq_len: int
    padded_len: int
    head_dim: int
    group: int
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
    """Flash attention by the Mosaic GPU kernels, same contract as ``reference_attention``; differentiable
    (custom VJP). Needs bfloat16 or float16 and heads of at most 256 (``mosaic_unsupported_reason``); the
    sequence is padded to whole tiles and the head dimension to a multiple of 64.

    >>> import jax, jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jax.ShapeDtypeStruct((1, 128, 2, 64), jnp.bfloat16)
    >>> run = jax.jit(lambda x: mosaic_attention(x, x, x, None, MaskSpec(True, None, 0.125)))
    >>> run.trace(x).lower(lowering_platforms=("cuda",)).as_text().count("@mosaic_gpu")  # no GPU needed
    1
    """
    why_not = mosaic_unsupported_reason(q)
    if why_not is not None:
        raise UnsupportedError(f"mosaic_attention: {why_not}", implementation="mosaic", reason=why_not)
    batch, seq, heads, head_dim = q.shape
    padded = round_up(
        seq, math.lcm(config.block_q, config.block_k, config.backward_block_q, config.backward_block_k)
    )
    padded_dim = round_up(head_dim, WGMMA_ROWS)  # a swizzled tile row: 64 bf16/f16 values
    plan = _Plan(spec, seq, padded, padded_dim, heads // k.shape[2], config)
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
    def operand(ref, slot=None) -> Any:
        """Shared-memory buffer ``ref`` (its number ``slot`` of several) as a matrix-multiply operand."""
        return ref if slot is None else ref.at[slot]

    @staticmethod
    def vector(ref, slot, layout) -> jax.Array:
        return plgpu.load(_Hardware.operand(ref, slot), (), layout=layout)

    @staticmethod
    def matmul(a, b, shape: tuple[int, int], *, transpose_b: bool) -> jax.Array:
        """``a @ b`` (``b.T`` when ``transpose_b``) in float32: ``a`` in registers or an ``operand``, ``b``
        an ``operand``."""

        def multiply(acc):
            plgpu.wgmma(acc, a, plgpu.transpose_ref(b, (1, 0)) if transpose_b else b)
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
    def operand(ref, slot=None) -> jax.Array:
        whole = ref[...]
        return whole if slot is None else lax.dynamic_index_in_dim(whole, slot, keepdims=False)

    @staticmethod
    def vector(ref, slot, layout) -> jax.Array:
        return _Interpreted.operand(ref, slot)

    @staticmethod
    def matmul(a, b, shape: tuple[int, int], *, transpose_b: bool) -> jax.Array:
        contract = (((1,), (1 if transpose_b else 0,)), ((), ()))
        return lax.dot_general(a, b, contract, preferred_element_type=jnp.float32)


def _operations(config: MosaicAttentionConfig) -> type[_Hardware] | type[_Interpreted]:
    return _Hardware if config.interpret is None else _Interpreted


def _narrow(visible: tuple, whole: tuple, document_range) -> tuple[Any, Any, Any, Any]:
    """``lo <= whole_lo <= whole_hi <= hi``: the blocks ``[lo, hi)`` visible by position (``visible``) and
    by document (``document_range``, a row of ``segment_block_ranges``), and within them ``[whole_lo,
    whole_hi)``, visible whole by both."""
    first, end, whole_first, whole_end = document_range
    lo = jnp.maximum(visible[0], first)
    hi = jnp.maximum(lo, jnp.minimum(visible[1], end))
    whole_lo = jnp.minimum(jnp.maximum(jnp.maximum(whole[0], whole_first), lo), hi)
    whole_hi = jnp.minimum(jnp.maximum(jnp.minimum(whole[1], whole_end), whole_lo), hi)
    return lo, whole_lo, whole_hi, hi


def _key_loop_bounds(plan: _Plan, q_block, bq: int, bk: int, document_range) -> tuple[Any, Any, Any, Any]:
    """The key blocks query block ``q_block`` visits, and those it sees whole (``_narrow``)."""
    mask = {"causal": plan.spec.causal, "sliding_window": plan.spec.sliding_window}
    blocks = plan.padded_len // bk
    visible = key_block_range(q_block, bq, bk, blocks, **mask)
    whole = whole_key_block_range(q_block, bq, bk, blocks, **mask, seq_len=plan.key_limit)
    return _narrow(visible, whole, document_range)


def _query_loop_bounds(plan: _Plan, k_block, bq: int, bk: int, document_range) -> tuple[Any, Any, Any, Any]:
    """The query blocks that see some of key block ``k_block``, and those that see all of it (``_narrow``)."""
    mask = {"causal": plan.spec.causal, "sliding_window": plan.spec.sliding_window}
    blocks = plan.padded_len // bq
    visible = query_block_range(k_block, bq, bk, blocks, **mask)
    whole = whole_query_block_range(k_block, bq, bk, blocks, **mask, seq_len=plan.key_limit)
    return _narrow(visible, whole, document_range)


def _three_loops(step, carry, bounds: tuple):
    """``step(index, carry, masked)`` over ``[lo, hi)``: unmasked over ``[whole_lo, whole_hi)``."""
    lo, whole_lo, whole_hi, hi = bounds
    carry = lax.fori_loop(lo, whole_lo, functools.partial(step, masked=True), carry)
    carry = lax.fori_loop(whole_lo, whole_hi, functools.partial(step, masked=False), carry)
    return lax.fori_loop(whole_hi, hi, functools.partial(step, masked=True), carry)


def _visible(plan: _Plan, q_positions, k_positions, q_segments, k_segments):
    return allowed_pairs(
        q_positions,
        k_positions,
        q_segments,
        k_segments,
        causal=plan.spec.causal,
        sliding_window=plan.spec.sliding_window,
        seq_len=plan.key_limit,
    )


def _store(pairs: list[tuple[Any, Any, Any]]) -> None:
    """Write each ``(value, shared-memory buffer, global-memory window)``: through the buffer, by TMA."""
    for value, smem, _ in pairs:
        smem[...] = value.astype(smem.dtype)
    plgpu.commit_smem()
    for _, smem, gmem in pairs:
        plgpu.copy_smem_to_gmem(smem, gmem)
    plgpu.wait_smem_to_gmem(0)


@dataclasses.dataclass(frozen=True)
class _Stream:
    """Tiles number ``start`` to ``end - 1`` fetched by TMA (``fetch(index, buffer)``) into ``stages``
    buffers (one barrier each), ``stages - 1`` tiles ahead of the one in use. Tiles are used in order, one
    at a time, and a tile's buffer is free again once the next is taken: a warpgroup's matrix multiplies
    are done when their accumulators are read."""

    fetch: Callable[[Any, Any], None]
    barriers: Any
    start: Any
    end: Any
    stages: int

    def begin(self) -> _Stream:
        for ahead in range(self.stages - 1):
            index = self.start + ahead
            pl.when(index < self.end)(functools.partial(self.fetch, index, ahead))
        return self

    def take(self, index) -> Any:
        """Start fetching the tile ``stages - 1`` after ``index`` and wait for ``index``; its buffer."""
        slot = lax.rem(index - self.start, self.stages)
        ahead = index + self.stages - 1
        pl.when(ahead < self.end)(lambda: self.fetch(ahead, lax.rem(ahead - self.start, self.stages)))
        plgpu.barrier_wait(self.barriers.at[slot])
        return slot


@dataclasses.dataclass(frozen=True)
class _KeyStream:
    """The key/value tiles (and their segment ids) one query block sees, ``bounds`` as ``_narrow`` gives
    them, streamed through ``plan.config.stages`` buffers."""

    tiles: _Stream
    bounds: tuple[Any, Any, Any, Any]
    segment_buffers: Any
    block_k: int

    def take(self, j) -> Any:
        return self.tiles.take(j)

    def visible(self, plan: _Plan, j, slot, q_positions: jax.Array, q_segments: jax.Array) -> jax.Array:
        """Which pairs of the query tile (``q_positions`` and ``q_segments``, as its scores) and key tile
        ``j`` (in buffer ``slot``) the mask leaves."""
        shape = q_positions.shape
        ops = _operations(plan.config)
        k_segments = lax.broadcast_in_dim(ops.vector(self.segment_buffers, slot, _COLUMN), shape, [1])
        k_positions = ops.positions(shape, 1) + j * self.block_k
        return _visible(plan, q_positions, k_positions, q_segments, k_segments)


def _stream_keys(plan: _Plan, bq: int, bk: int, gmem: tuple, smem: tuple, barriers) -> _KeyStream:
    """Start streaming to this program's query block: ``gmem`` is (keys, values, segment ids, the key ranges
    of ``segment_block_ranges``), ``smem`` the buffers of the keys, values and their segment ids."""
    k_gmem, v_gmem, segment_gmem, range_gmem = gmem
    k_smem, v_smem, k_segment_smem = smem
    head, q_block, row = lax.axis_index("heads"), lax.axis_index("blocks"), lax.axis_index("batch")
    kv_head = lax.div(head, jnp.int32(plan.group))

    def fetch(j, slot):
        keys, barrier = pl.ds(j * bk, bk), barriers.at[slot]
        plgpu.copy_gmem_to_smem(k_gmem.at[row, keys, kv_head], k_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(v_gmem.at[row, keys, kv_head], v_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(segment_gmem.at[row, keys], k_segment_smem.at[slot], barrier)

    bounds = _key_loop_bounds(plan, q_block, bq, bk, [range_gmem[row, q_block, c] for c in range(4)])
    tiles = _Stream(fetch, barriers, bounds[0], bounds[3], plan.config.stages).begin()
    return _KeyStream(tiles, bounds, k_segment_smem, bk)


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
    bq, bk, dim = plan.config.block_q, plan.config.block_k, plan.head_dim
    head, q_block, row = lax.axis_index("heads"), lax.axis_index("blocks"), lax.axis_index("batch")
    queries = pl.ds(q_block * bq, bq)
    plgpu.copy_gmem_to_smem(q_gmem.at[row, queries, head], q_smem, q_barrier)
    plgpu.copy_gmem_to_smem(segment_gmem.at[row, queries], q_segment_smem, q_barrier)
    stream = _stream_keys(
        plan,
        bq,
        bk,
        (k_gmem, v_gmem, segment_gmem, range_gmem),
        (k_smem, v_smem, k_segment_smem),
        kv_barriers,
    )
    plgpu.barrier_wait(q_barrier)
    q = ops.operand(q_smem)
    q_segments = lax.broadcast_in_dim(ops.vector(q_segment_smem, None, _ROW), (bq, bk), [0])
    q_positions = ops.positions((bq, bk), 0) + q_block * bq
    scale = plan.spec.softmax_scale * _LOG2E  # scores in base 2: exp2 is one instruction

    def step(j, carry, masked: bool):
        acc, row_max, normalizer = carry
        slot = stream.take(j)
        scores = ops.matmul(q, ops.operand(k_smem, slot), (bq, bk), transpose_b=True) * scale
        if masked:
            visible = stream.visible(plan, j, slot, q_positions, q_segments)
            scores = jnp.where(visible, scores, -jnp.inf)
        new_max = jnp.maximum(row_max, scores.max(axis=1))
        shift = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        rescale = jnp.exp2(row_max - shift)
        weights = jnp.exp2(scores - lax.broadcast_in_dim(shift, (bq, bk), [0]))
        normalizer = normalizer * rescale + weights.sum(axis=1)
        v = ops.operand(v_smem, slot)
        values = ops.matmul(weights.astype(q_smem.dtype), v, (bq, dim), transpose_b=False)
        acc = acc * lax.broadcast_in_dim(rescale, (bq, dim), [0]) + values
        return acc, new_max, normalizer

    carry = (
        ops.layout(jnp.zeros((bq, dim), jnp.float32), _TILE),
        ops.layout(jnp.full((bq,), -jnp.inf, jnp.float32), _ROW),
        ops.layout(jnp.zeros((bq,), jnp.float32), _ROW),
    )
    acc, row_max, normalizer = _three_loops(step, carry, stream.bounds)
    nonempty = normalizer > 0
    safe = jnp.where(nonempty, normalizer, 1.0)
    out = acc / lax.broadcast_in_dim(safe, (bq, dim), [0])
    lse = jnp.where(nonempty, row_max / _LOG2E + jnp.log(safe), jnp.inf)
    _store([(out, q_smem, out_gmem.at[row, queries, head]), (lse, lse_smem, lse_gmem.at[row, head, queries])])


def _key_value_kernel(
    plan: _Plan,
    q_gmem,
    k_gmem,
    v_gmem,
    segment_gmem,
    range_gmem,
    d_out_gmem,
    lse_gmem,
    delta_gmem,
    dk_gmem,
    dv_gmem,
    k_smem,
    v_smem,
    k_segment_smem,
    q_smem,
    d_out_smem,
    q_segment_smem,
    lse_smem,
    delta_smem,
    k_barrier,
    q_barriers,
):
    """dK and dV of one key block of one key/value head, over the query heads of its group and the query
    blocks that see the key block: query tiles stream through buffers as key tiles do forward."""
    ops = _operations(plan.config)
    bq, bk, dim, group = plan.config.backward_block_q, plan.config.backward_block_k, plan.head_dim, plan.group
    kv_head, k_block, row = lax.axis_index("heads"), lax.axis_index("blocks"), lax.axis_index("batch")
    keys = pl.ds(k_block * bk, bk)
    plgpu.copy_gmem_to_smem(k_gmem.at[row, keys, kv_head], k_smem, k_barrier)
    plgpu.copy_gmem_to_smem(v_gmem.at[row, keys, kv_head], v_smem, k_barrier)
    plgpu.copy_gmem_to_smem(segment_gmem.at[row, keys], k_segment_smem, k_barrier)

    def fetch(member, i, slot):
        head, queries, barrier = kv_head * group + member, pl.ds(i * bq, bq), q_barriers.at[slot]
        plgpu.copy_gmem_to_smem(q_gmem.at[row, queries, head], q_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(d_out_gmem.at[row, queries, head], d_out_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(segment_gmem.at[row, queries], q_segment_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(lse_gmem.at[row, head, queries], lse_smem.at[slot], barrier)
        plgpu.copy_gmem_to_smem(delta_gmem.at[row, head, queries], delta_smem.at[slot], barrier)

    bounds = _query_loop_bounds(plan, k_block, bq, bk, [range_gmem[row, k_block, c] for c in range(4)])
    blocks = bounds[3] - bounds[0]

    def fetch_nth(n, slot):  # the n-th query tile used: query head n // blocks of the group, its tile
        fetch(lax.div(n, blocks), bounds[0] + lax.rem(n, blocks), slot)

    tiles = _Stream(fetch_nth, q_barriers, jnp.int32(0), group * blocks, plan.config.stages).begin()
    plgpu.barrier_wait(k_barrier)
    k, v = ops.operand(k_smem), ops.operand(v_smem)
    k_segments = lax.broadcast_in_dim(ops.vector(k_segment_smem, None, _ROW), (bk, bq), [0])
    k_positions = ops.positions((bk, bq), 0) + k_block * bk
    scale = plan.spec.softmax_scale

    def step(i, carry, member, masked: bool):
        dk, dv, taken = carry  # taken: query tiles used so far
        slot = tiles.take(taken)
        q, d_out = ops.operand(q_smem, slot), ops.operand(d_out_smem, slot)
        # Transposed tiles, keys along rows: probabilities, and the gradients of their scores.
        lse = lax.broadcast_in_dim(ops.vector(lse_smem, slot, _COLUMN), (bk, bq), [1])
        scores = ops.matmul(k, q, (bk, bq), transpose_b=True) * (scale * _LOG2E)
        probabilities = jnp.exp2(scores - lse * _LOG2E)
        if masked:
            q_segments = lax.broadcast_in_dim(ops.vector(q_segment_smem, slot, _COLUMN), (bk, bq), [1])
            q_positions = ops.positions((bk, bq), 1) + i * bq
            visible = _visible(plan, q_positions, k_positions, q_segments, k_segments)
            probabilities = jnp.where(visible, probabilities, 0.0)
        dv = dv + ops.matmul(probabilities.astype(k_smem.dtype), d_out, (bk, dim), transpose_b=False)
        d_probabilities = ops.matmul(v, d_out, (bk, bq), transpose_b=True)
        delta = lax.broadcast_in_dim(ops.vector(delta_smem, slot, _COLUMN), (bk, bq), [1])
        d_scores = probabilities * (d_probabilities - delta) * scale
        dk = dk + ops.matmul(d_scores.astype(k_smem.dtype), q, (bk, dim), transpose_b=False)
        return dk, dv, taken + 1

    def query_head(member, carry):
        return _three_loops(functools.partial(step, member=member), carry, bounds)

    zeros = ops.layout(jnp.zeros((bk, dim), jnp.float32), _TILE)
    dk, dv, _ = lax.fori_loop(0, group, query_head, (zeros, zeros, jnp.int32(0)))
    _store([(dk, k_smem, dk_gmem.at[row, keys, kv_head]), (dv, v_smem, dv_gmem.at[row, keys, kv_head])])


def _query_kernel(
    plan: _Plan,
    q_gmem,
    k_gmem,
    v_gmem,
    segment_gmem,
    range_gmem,
    d_out_gmem,
    lse_gmem,
    delta_gmem,
    dq_gmem,
    q_smem,
    d_out_smem,
    q_segment_smem,
    lse_smem,
    delta_smem,
    k_smem,
    v_smem,
    k_segment_smem,
    q_barrier,
    kv_barriers,
):
    """dQ of one query block of one head, over the key blocks it sees."""
    ops = _operations(plan.config)
    bq, bk, dim = plan.config.backward_block_q, plan.config.backward_block_k, plan.head_dim
    head, q_block, row = lax.axis_index("heads"), lax.axis_index("blocks"), lax.axis_index("batch")
    queries = pl.ds(q_block * bq, bq)
    plgpu.copy_gmem_to_smem(q_gmem.at[row, queries, head], q_smem, q_barrier)
    plgpu.copy_gmem_to_smem(d_out_gmem.at[row, queries, head], d_out_smem, q_barrier)
    plgpu.copy_gmem_to_smem(segment_gmem.at[row, queries], q_segment_smem, q_barrier)
    plgpu.copy_gmem_to_smem(lse_gmem.at[row, head, queries], lse_smem, q_barrier)
    plgpu.copy_gmem_to_smem(delta_gmem.at[row, head, queries], delta_smem, q_barrier)
    stream = _stream_keys(
        plan,
        bq,
        bk,
        (k_gmem, v_gmem, segment_gmem, range_gmem),
        (k_smem, v_smem, k_segment_smem),
        kv_barriers,
    )
    plgpu.barrier_wait(q_barrier)
    q, d_out = ops.operand(q_smem), ops.operand(d_out_smem)
    q_segments = lax.broadcast_in_dim(ops.vector(q_segment_smem, None, _ROW), (bq, bk), [0])
    q_positions = ops.positions((bq, bk), 0) + q_block * bq
    lse = lax.broadcast_in_dim(ops.vector(lse_smem, None, _ROW) * _LOG2E, (bq, bk), [0])
    delta = lax.broadcast_in_dim(ops.vector(delta_smem, None, _ROW), (bq, bk), [0])
    scale = plan.spec.softmax_scale

    def step(j, dq, masked: bool):
        slot = stream.take(j)
        k = ops.operand(k_smem, slot)
        probabilities = jnp.exp2(ops.matmul(q, k, (bq, bk), transpose_b=True) * (scale * _LOG2E) - lse)
        if masked:
            visible = stream.visible(plan, j, slot, q_positions, q_segments)
            probabilities = jnp.where(visible, probabilities, 0.0)
        d_probabilities = ops.matmul(d_out, ops.operand(v_smem, slot), (bq, bk), transpose_b=True)
        d_scores = probabilities * (d_probabilities - delta) * scale
        return dq + ops.matmul(d_scores.astype(q_smem.dtype), k, (bq, dim), transpose_b=False)

    dq = _three_loops(step, ops.layout(jnp.zeros((bq, dim), jnp.float32), _TILE), stream.bounds)
    _store([(dq, q_smem, dq_gmem.at[row, queries, head])])


def _launch(plan: _Plan, kernel, out_type, grid: tuple[int, int, int], scratch: list):
    """``kernel`` over a (head, block, batch row) grid, one warpgroup per program."""
    return plgpu.kernel(
        functools.partial(kernel, plan),
        out_type=out_type,
        grid=grid,
        grid_names=("heads", "blocks", "batch"),
        scratch_types=scratch,
        compiler_params=plgpu.CompilerParams(approx_math=True),
        interpret=plan.config.interpret,
    )


def _tiles(ops, dtype, count: int | None, block: int, dim: int) -> tuple[Any, Any]:
    """A tile buffer of ``block`` rows of ``dim`` and one of their segment ids, ``count`` deep (or one)."""
    depth = () if count is None else (count,)
    return ops.tile_buffer((*depth, block, dim), dtype), plgpu.SMEM((*depth, block), jnp.int32)


def _forward(plan: _Plan, q, k, v, segment_ids):
    batch, padded, heads, dim = q.shape
    bq, bk = plan.config.block_q, plan.config.block_k
    ops, stages = _operations(plan.config), plan.config.stages
    q_tile, q_segments = _tiles(ops, q.dtype, None, bq, dim)
    kv_tile, k_segments = _tiles(ops, q.dtype, stages, bk, dim)
    run = _launch(
        plan,
        _forward_kernel,
        (jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((batch, heads, padded), jnp.float32)),
        (heads, padded // bq, batch),
        [
            q_tile,
            kv_tile,
            kv_tile,
            q_segments,
            k_segments,
            plgpu.SMEM((bq,), jnp.float32),
            plgpu.Barrier(num_arrivals=2),
            plgpu.Barrier(num_arrivals=3, num_barriers=stages),
        ],
    )
    return run(q, k, v, segment_ids, segment_block_ranges(segment_ids, bq, bk))


def _backward(plan: _Plan, q, k, v, segment_ids, out, lse, d_out):
    batch, padded, heads, dim = q.shape
    bq, bk = plan.config.backward_block_q, plan.config.backward_block_k
    ops, stages = _operations(plan.config), plan.config.stages
    d_out = d_out.astype(q.dtype)
    delta = jnp.einsum("bqhd,bqhd->bhq", out.astype(jnp.float32), d_out.astype(jnp.float32))
    inputs = (q, k, v, segment_ids)
    statistics = (d_out, lse, delta)

    k_tile, k_segments = _tiles(ops, q.dtype, None, bk, dim)
    q_tiles, q_segments = _tiles(ops, q.dtype, stages, bq, dim)
    dk, dv = _launch(
        plan,
        _key_value_kernel,
        (jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        (k.shape[2], padded // bk, batch),
        [
            k_tile,
            k_tile,
            k_segments,
            q_tiles,
            q_tiles,
            q_segments,
            plgpu.SMEM((stages, bq), jnp.float32),
            plgpu.SMEM((stages, bq), jnp.float32),
            plgpu.Barrier(num_arrivals=3),
            plgpu.Barrier(num_arrivals=5, num_barriers=stages),
        ],
    )(*inputs, segment_block_ranges(segment_ids, bk, bq), *statistics)

    q_tile, q_segments = _tiles(ops, q.dtype, None, bq, dim)
    kv_tiles, k_segments = _tiles(ops, q.dtype, stages, bk, dim)
    dq = _launch(
        plan,
        _query_kernel,
        jax.ShapeDtypeStruct(q.shape, q.dtype),
        (heads, padded // bq, batch),
        [
            q_tile,
            q_tile,
            q_segments,
            plgpu.SMEM((bq,), jnp.float32),
            plgpu.SMEM((bq,), jnp.float32),
            kv_tiles,
            kv_tiles,
            k_segments,
            plgpu.Barrier(num_arrivals=5),
            plgpu.Barrier(num_arrivals=3, num_barriers=stages),
        ],
    )(*inputs, segment_block_ranges(segment_ids, bq, bk), *statistics)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attend(plan: _Plan, q, k, v, segment_ids):
    return _forward(plan, q, k, v, segment_ids)[0]


def _attend_fwd(plan: _Plan, q, k, v, segment_ids):
    out, lse = _forward(plan, q, k, v, segment_ids)
    return out, (q, k, v, segment_ids, out, lse)


def _attend_bwd(plan: _Plan, residuals, d_out):
    return (*_backward(plan, *residuals, d_out), None)


_attend.defvjp(_attend_fwd, _attend_bwd)
