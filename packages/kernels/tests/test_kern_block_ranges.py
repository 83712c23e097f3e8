"""The block ranges that bound the blocked loops. The documents' ranges: never a visible pair outside them
(whatever the ids), and with packed documents nothing but the blocks that hold one (so the work shrinks with
the documents). The ranges visible whole, where the kernels skip the mask: every pair in them is visible,
and every block whose pairs all are is in them."""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.kernels._masking import (
    allowed,
    segment_block_ranges,
    whole_key_block_range,
    whole_query_block_range,
)

blocks = st.sampled_from([1, 2, 4, 8])

# One program per shape and settings, as the kernels run these (inside their jit), reused by the examples
# that repeat one. Eagerly, each of their operations compiles alone for every new shape: for the ranges about
# 0.2 CPU-s a new call against 0.08 for the one program, and most of these properties' time.
ranges_of = jax.jit(segment_block_ranges, static_argnums=(1, 2))
mask_of = jax.jit(allowed, static_argnums=(2, 3), static_argnames=("causal", "sliding_window", "seq_len"))


def meeting_blocks(ids: np.ndarray, row_block: int, column_block: int) -> list[list[set[int]]]:
    """Per row and row block, the column blocks holding a token of one of its (non-negative) segments."""
    found = []
    for row in ids:
        per_block = [set() for _ in range(len(row) // row_block)]
        for i, a in enumerate(row):
            for j, b in enumerate(row):
                if a >= 0 and a == b:
                    per_block[i // row_block].add(j // column_block)
        found.append(per_block)
    return found


@given(
    ids=st.lists(st.lists(st.integers(-1, 4), min_size=16, max_size=16), min_size=1, max_size=3),
    row_block=blocks,
    column_block=blocks,
)
def test_every_pair_of_one_segment_lies_inside_its_range(ids, row_block, column_block):
    """And the run visible whole lies inside it, each of its blocks in the row block's one document."""
    ids = np.asarray(ids, np.int32)
    ranges = np.asarray(ranges_of(ids, row_block, column_block))
    meeting = meeting_blocks(ids, row_block, column_block)
    for row_ids, row, per_block in zip(ids, ranges, meeting, strict=True):
        for r, ((first, end, whole_first, whole_end), columns) in enumerate(zip(row, per_block, strict=True)):
            assert 0 <= first <= end <= 16 // column_block
            assert all(first <= c < end for c in columns), (first, end, columns)
            assert whole_first == whole_end or first <= whole_first < whole_end <= end
            own = row_ids[r * row_block : (r + 1) * row_block]
            for c in range(whole_first, whole_end):  # one document on both sides, no padding
                theirs = row_ids[c * column_block : (c + 1) * column_block]
                assert own.min() >= 0 and len({*own, *theirs}) == 1, (own, theirs)


@given(
    starts=st.lists(st.booleans(), min_size=32, max_size=32),
    padding=st.integers(0, 32),
    row_block=blocks,
    column_block=blocks,
)
def test_packed_documents_visit_only_the_blocks_that_meet(starts, padding, row_block, column_block):
    """Contiguous documents numbered in order (as packing writes them), padding at the end: the range is
    exactly the blocks holding a token of the block's documents (empty for a block of only padding), and
    the run visible whole exactly the blocks in the row block's one document."""
    ids = np.cumsum(starts).astype(np.int32)
    ids[len(ids) - padding :] = -1
    ranges = np.asarray(ranges_of(ids[None], row_block, column_block))[0]
    meeting = meeting_blocks(ids[None], row_block, column_block)[0]
    for r, ((first, end, whole_first, whole_end), columns) in enumerate(zip(ranges, meeting, strict=True)):
        assert set(range(first, end)) == columns
        own = set(ids[r * row_block : (r + 1) * row_block].tolist())
        one_document = len(own) == 1 and -1 not in own
        inside = {c for c in columns if set(ids[c * column_block : (c + 1) * column_block].tolist()) == own}
        assert set(range(whole_first, whole_end)) == (inside if one_document else set())


def test_four_documents_cost_four_causal_rows_of_their_length():
    """The 1B step's shape: a 4,096-token row of four documents, 128-query by 64-key blocks. Causal bounds
    alone visit 1,056 blocks; with the documents' ranges, each document's 8 query blocks visit what a causal
    row of 1,024 tokens does (2, 4, ..., 16 key blocks): 288 in all, 27%."""
    ids = np.repeat(np.arange(4, dtype=np.int32), 1024)[None]
    ranges = np.asarray(segment_block_ranges(ids, 128, 64))[0, :, :2]
    causal_end = (np.arange(32) + 1) * 2
    visited = np.minimum(ranges[:, 1], causal_end) - ranges[:, 0]
    assert causal_end.sum() == 1056 and visited.sum() == 4 * sum(2 * (r + 1) for r in range(8)) == 288


def test_lengths_that_are_not_whole_blocks_are_refused():
    with pytest.raises(ValueError, match="length 10 is not whole blocks of 4 and 2"):
        segment_block_ranges(np.zeros((1, 10), np.int32), 4, 2)


@given(
    blocks=st.integers(1, 6),
    block_q=blocks,
    block_k=blocks,
    causal=st.booleans(),
    window=st.one_of(st.none(), st.integers(1, 40)),
    cut=st.integers(0, 7),
)
def test_the_blocks_visible_whole_by_position_are_exactly_those_without_a_hidden_pair(
    blocks, block_q, block_k, causal, window, cut
):
    """Queries against keys and keys against queries, with a true length ``cut`` short of the padded one."""
    length = blocks * max(block_q, block_k) * 2
    seq_len = max(length - cut, 1) if cut else None
    settings = {"causal": causal, "sliding_window": window, "seq_len": seq_len}
    mask = np.asarray(mask_of(np.arange(length), np.arange(length), None, None, **settings))
    for i in range(length // block_q):
        lo, hi = whole_key_block_range(i, block_q, block_k, length // block_k, **settings)
        rows = mask[i * block_q : (i + 1) * block_q]
        whole = {j for j in range(length // block_k) if rows[:, j * block_k : (j + 1) * block_k].all()}
        assert set(range(int(lo), int(hi))) == whole, (i, int(lo), int(hi), whole)
    for j in range(length // block_k):
        lo, hi = whole_query_block_range(j, block_q, block_k, length // block_q, **settings)
        columns = mask[:, j * block_k : (j + 1) * block_k]
        whole = {i for i in range(length // block_q) if columns[i * block_q : (i + 1) * block_q].all()}
        assert set(range(int(lo), int(hi))) == whole, (j, int(lo), int(hi), whole)
