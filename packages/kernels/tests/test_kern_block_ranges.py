"""The documents' block ranges bound the blocked loops: never a visible pair outside them (whatever the ids),
and with packed documents nothing but the blocks that hold one (so the work shrinks with the documents)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.kernels._masking import segment_block_ranges

blocks = st.sampled_from([1, 2, 4, 8])


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
    ids = np.asarray(ids, np.int32)
    ranges = np.asarray(segment_block_ranges(ids, row_block, column_block))
    for row, per_block in zip(ranges, meeting_blocks(ids, row_block, column_block), strict=True):
        for (first, end), columns in zip(row, per_block, strict=True):
            assert 0 <= first <= end <= 16 // column_block
            assert all(first <= c < end for c in columns), (first, end, columns)


@given(
    starts=st.lists(st.booleans(), min_size=32, max_size=32),
    padding=st.integers(0, 32),
    row_block=blocks,
    column_block=blocks,
)
def test_packed_documents_visit_only_the_blocks_that_meet(starts, padding, row_block, column_block):
    """Contiguous documents numbered in order (as packing writes them), padding at the end: the range is
    exactly the blocks holding a token of the block's documents, and empty for a block of only padding."""
    ids = np.cumsum(starts).astype(np.int32)
    ids[len(ids) - padding :] = -1
    ranges = np.asarray(segment_block_ranges(ids[None], row_block, column_block))[0]
    for (first, end), columns in zip(
        ranges, meeting_blocks(ids[None], row_block, column_block)[0], strict=True
    ):
        assert set(range(first, end)) == columns


def test_four_documents_cost_four_causal_rows_of_their_length():
    """The 1B step's shape: a 4,096-token row of four documents, 128-query by 64-key blocks. Causal bounds
    alone visit 1,056 blocks; with the documents' ranges, each document's 8 query blocks visit what a causal
    row of 1,024 tokens does (2, 4, ..., 16 key blocks): 288 in all, 27%."""
    ids = np.repeat(np.arange(4, dtype=np.int32), 1024)[None]
    ranges = np.asarray(segment_block_ranges(ids, 128, 64))[0]
    causal_end = (np.arange(32) + 1) * 2
    visited = np.minimum(ranges[:, 1], causal_end) - ranges[:, 0]
    assert causal_end.sum() == 1056 and visited.sum() == 4 * sum(2 * (r + 1) for r in range(8)) == 288


def test_lengths_that_are_not_whole_blocks_are_refused():
    with pytest.raises(ValueError, match="length 10 is not whole blocks of 4 and 2"):
        segment_block_ranges(np.zeros((1, 10), np.int32), 4, 2)
