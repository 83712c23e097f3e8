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
pair; they use ``lax`` integer ops so they also run inside Pallas kernels. ``segment_block_ranges`` bounds
them by documents too, computed outside a kernel from the segment ids: with packed documents the work then
shrinks with their number, as splash attention's block mask does on TPU.
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
    qs = ks = None
    if q_segments is not None:
        qs, ks = q_segments[..., :, None], k_segments[..., None, :]
    qi, kj = q_positions[..., :, None], k_positions[..., None, :]
    mask = allowed_pairs(qi, kj, qs, ks, causal=causal, sliding_window=sliding_window, seq_len=seq_len)
    shape = jnp.broadcast_shapes(qi.shape, kj.shape, *(() if qs is None else (qs.shape, ks.shape)))
    return jnp.ones(shape, jnp.bool_) if mask is None else jnp.broadcast_to(mask, shape)


def allowed_pairs(
    qi: jax.Array,
    kj: jax.Array,
    qs: jax.Array | None,
    ks: jax.Array | None,
    *,
    causal: bool,
    sliding_window: int | None,
    seq_len: int | None = None,
) -> jax.Array | None:
    """``allowed`` on operands already broadcast against each other (query positions and segments ``qi``,
    ``qs``; key ones ``kj``, ``ks``), or ``None`` when every pair is visible: the form a kernel whose arrays
    carry a register layout (Mosaic GPU's) builds its mask in.

    >>> import jax.numpy as jnp
    >>> qi, kj = jnp.arange(2)[:, None], jnp.arange(2)[None, :]
    >>> allowed_pairs(qi, kj, None, None, causal=True, sliding_window=None).astype(int).tolist()
    [[1, 0], [1, 1]]
    >>> allowed_pairs(qi, kj, None, None, causal=False, sliding_window=None) is None
    True
    """
    terms = []
    if causal:
        terms.append(kj <= qi)
    if sliding_window is not None:
        terms.append(qi - kj < sliding_window)
        if not causal:
            terms.append(kj - qi < sliding_window)
    if seq_len is not None:
        terms.append(kj < seq_len)
    if qs is not None:
        terms += [qs == ks, qs >= 0]
    mask = None
    for term in terms:
        mask = term if mask is None else mask & term
    return mask


def _extent(block: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """The first and last position of block number ``block`` of ``size`` positions."""
    first = block * size
    return first, first + size - 1


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
    first_q, last_q = _extent(q_block, block_q)
    lo, hi = jnp.int32(0), jnp.int32(num_k_blocks)
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
    first_k, last_k = _extent(k_block, block_k)
    lo, hi = jnp.int32(0), jnp.int32(num_q_blocks)
    if causal:
        lo = lax.div(first_k, block_q).astype(jnp.int32)
    elif sliding_window is not None:
        lo = lax.div(jnp.maximum(first_k - sliding_window + 1, 0), block_q).astype(jnp.int32)
    if sliding_window is not None:
        hi = jnp.minimum(hi, lax.div(last_k + sliding_window - 1, block_q) + 1).astype(jnp.int32)
    return lo, hi


def whole_key_block_range(
    q_block: jax.Array,
    block_q: int,
    block_k: int,
    num_k_blocks: int,
    *,
    causal: bool,
    sliding_window: int | None,
    seq_len: int | None,
) -> tuple[jax.Array, jax.Array]:
    """The half-open range of key blocks that every query of query block ``q_block`` sees whole, by
    position alone (causal, window, true length): a loop may skip the mask there. It may be empty
    (``lo >= hi``)."""
    first_q, last_q = _extent(q_block, block_q)
    lo, hi = jnp.int32(0), jnp.int32(num_k_blocks)
    if causal:  # the block's last key at or before the first query
        hi = jnp.minimum(hi, lax.div(first_q + 1, block_k))
    if sliding_window is not None:  # its first key within the window of the last query
        lo = jnp.maximum(lo, lax.div(jnp.maximum(last_q - sliding_window + block_k, 0), block_k))
        if not causal:  # and its last key within the window ahead of the first query
            hi = jnp.minimum(hi, lax.div(jnp.maximum(first_q + sliding_window, 0), block_k))
    if seq_len is not None:  # no padded key in it
        hi = jnp.minimum(hi, seq_len // block_k)
    return lo.astype(jnp.int32), hi.astype(jnp.int32)


def whole_query_block_range(
    k_block: jax.Array,
    block_q: int,
    block_k: int,
    num_q_blocks: int,
    *,
    causal: bool,
    sliding_window: int | None,
    seq_len: int | None,
) -> tuple[jax.Array, jax.Array]:
    """The half-open range of query blocks every query of which sees all of key block ``k_block``, by
    position alone; it may be empty (``lo >= hi``)."""
    first_k, last_k = _extent(k_block, block_k)
    lo, hi = jnp.int32(0), jnp.int32(num_q_blocks)
    if causal:  # the block's first query at or after the last key
        lo = jnp.maximum(lo, lax.div(last_k + block_q - 1, block_q))
    if sliding_window is not None:  # its last query within the window of the first key
        hi = jnp.minimum(hi, lax.div(jnp.maximum(first_k + sliding_window, 0), block_q))
        if not causal:  # and its first query within the window behind the last key
            lo = jnp.maximum(lo, lax.div(jnp.maximum(last_k - sliding_window + block_q, 0), block_q))
    if seq_len is not None:  # a key block holding padding is never whole
        hi = jnp.where(last_k < seq_len, hi, 0)
    return lo.astype(jnp.int32), hi.astype(jnp.int32)


def _by_block(segment_ids: jax.Array, block: int) -> jax.Array:
    """``(batch, length)`` ids as ``(batch, blocks, block)``."""
    batch, length = segment_ids.shape
    return segment_ids.reshape(batch, length // block, block)


def _block_extents(segment_ids: jax.Array, block: int) -> tuple[jax.Array, jax.Array]:
    """The least and greatest non-negative segment id of each block of ``block`` positions (a block of only
    padding gets an empty extent: least above greatest)."""
    ids = _by_block(segment_ids, block)
    real = ids >= 0
    least = jnp.min(jnp.where(real, ids, jnp.iinfo(jnp.int32).max), axis=-1)
    greatest = jnp.max(jnp.where(real, ids, -1), axis=-1)
    return least, greatest


def _span(flags: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[first, last + 1)`` of the true values along the last axis (``[0, 0)`` if none)."""
    columns = flags.shape[-1]
    found = jnp.any(flags, axis=-1)
    first = jnp.argmax(flags, axis=-1)
    end = columns - jnp.argmax(flags[..., ::-1], axis=-1)
    return jnp.where(found, first, 0), jnp.where(found, end, 0)


def _first_run(flags: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``[first, end)`` of the first run of true values along the last axis (``[0, 0)`` if none: every
    value is then a false one at or after 0)."""
    first, _ = _span(flags)
    after = (jnp.arange(flags.shape[-1]) >= first[..., None]) & ~flags
    return first, jnp.where(jnp.any(after, axis=-1), jnp.argmax(after, axis=-1), flags.shape[-1])


def _uniform_segment(segment_ids: jax.Array, block: int) -> jax.Array:
    """Each block's segment id when all of its tokens carry the same non-negative one, else -1."""
    ids = _by_block(segment_ids, block)
    least, greatest = jnp.min(ids, axis=-1), jnp.max(ids, axis=-1)
    return jnp.where((least == greatest) & (least >= 0), least, -1)


def segment_block_ranges(segment_ids: jax.Array, row_block: int, column_block: int) -> jax.Array:
    """For each block of ``row_block`` positions, two half-open ranges of ``column_block`` blocks, as
    ``(batch, row blocks, 4)`` int32 ``[first, end, whole_first, whole_end]``: the blocks whose segment
    ids can meet its own, and within them a run of blocks wholly in the row block's one document (empty
    unless the row block lies wholly in one), where no pair needs the documents' mask.

    Blocks meet when the ranges of their non-negative ids overlap, so every pair of tokens of one segment
    lies inside ``[first, end)`` whatever the ids' order (blocks between may be visited for nothing when
    documents are not contiguous); a block of only padding gets an empty range. Queries and keys share the
    ids (self-attention): rows may be query blocks and columns key blocks, or the other way round.

    >>> import jax.numpy as jnp
    >>> ids = jnp.array([[0, 0, 0, 0, 1, 1, 2, 2, 2, 2, -1, -1]], jnp.int32)  # three documents, padding
    >>> segment_block_ranges(ids, 4, 2)[0].tolist()
    [[0, 2, 0, 2], [2, 5, 0, 0], [3, 5, 0, 0]]
    """
    length = segment_ids.shape[1]
    if length % row_block or length % column_block:
        raise ValueError(f"length {length} is not whole blocks of {row_block} and {column_block}")
    row_least, row_greatest = _block_extents(segment_ids, row_block)
    column_least, column_greatest = _block_extents(segment_ids, column_block)
    meets = (row_least[:, :, None] <= column_greatest[:, None, :]) & (
        column_least[:, None, :] <= row_greatest[:, :, None]
    )
    row_segment = _uniform_segment(segment_ids, row_block)[:, :, None]
    whole = (row_segment >= 0) & (_uniform_segment(segment_ids, column_block)[:, None, :] == row_segment)
    return jnp.stack([*_span(meets), *_first_run(whole)], axis=-1).astype(jnp.int32)
