"""Packing whole conversations into rows: every conversation once, never split, rows within their width,
the same rows for the same lengths, and the rows' segment ids, positions and weights what the loader
needs (a conversation's tokens attend within it, count positions from 0, and weigh as stored)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore import BatchLoader, MixtureDataset, Rows, pack_lengths
from meltemi.datastore.sequences import positions_within_segments

lengths_and_width = st.integers(2, 64).flatmap(
    lambda width: st.tuples(st.lists(st.integers(1, width), min_size=1, max_size=300), st.just(width))
)


@given(lengths_and_width, st.integers(1, 50))
def test_every_conversation_is_packed_once_whole_and_rows_fit(case, block):
    lengths, width = case
    lengths = np.array(lengths)
    packing = pack_lengths(lengths, width, block=block)
    assert sorted(packing.members.tolist()) == list(range(len(lengths)))
    for r in range(packing.num_rows):
        row = packing.row(r)
        assert row.size and lengths[row].sum() <= width
        assert row.tolist() == sorted(row.tolist())
        assert len({i // block for i in row.tolist()}) == 1  # a row never mixes blocks
    assert packing.fill(lengths, width) == pytest.approx(lengths.sum() / (packing.num_rows * width))


@given(lengths_and_width)
def test_best_fit_needs_no_more_rows_than_one_row_per_longest_first_greedy_bound(case):
    lengths, width = case
    lengths = np.array(lengths)
    packing = pack_lengths(lengths, width, block=len(lengths))
    # first-fit decreasing and best-fit decreasing use at most 11/9 OPT + 1 rows, and OPT >= total / width
    assert packing.num_rows <= int(np.ceil(11 / 9 * np.ceil(lengths.sum() / width))) + 1


def test_the_packing_is_a_pure_function_of_the_lengths_and_a_longer_store_keeps_earlier_blocks():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 100, size=500)
    a, b = pack_lengths(lengths, 128, block=100), pack_lengths(lengths.copy(), 128, block=100)
    assert a.members.tolist() == b.members.tolist() and a.row_starts.tolist() == b.row_starts.tolist()
    longer = pack_lengths(np.concatenate([lengths, rng.integers(1, 100, size=50)]), 128, block=100)
    first = longer.row_starts[: a.num_rows + 1]
    assert (
        longer.members[: len(a.members)].tolist() == a.members.tolist()
        and first.tolist() == a.row_starts.tolist()
    )


def test_a_conversation_longer_than_a_row_is_named():
    with pytest.raises(ValueError, match=r"conversation 2 has 9 tokens, more than a row of 8 holds \(1 such"):
        pack_lengths(np.array([3, 4, 9]), 8)


def test_positions_restart_at_each_segment():
    segments = np.array([[0, 0, 0, 1, 1, 2, 2, 2], [0, 1, 2, 3, 3, 3, 3, 3]])
    assert positions_within_segments(segments).tolist() == [
        [0, 1, 2, 0, 1, 0, 1, 2],
        [0, 0, 0, 0, 1, 2, 3, 4],
    ]


class Rowed:
    """A dataset of fixed rows: positions and weights given (a packed chat source) or not (text)."""

    def __init__(self, rows: Rows, num_sequences: int | None = None):
        self.rows, self.seq_len = rows, rows.tokens.shape[1] - 1
        self.num_sequences = len(rows.tokens) if num_sequences is None else num_sequences

    def read(self, indices):
        indices = np.asarray(indices) % len(self.rows.tokens)
        pick = lambda a: None if a is None else a[indices]  # noqa: E731
        r = self.rows
        return Rows(
            r.tokens[indices], r.segment_ids[indices], r.source[indices], pick(r.positions), pick(r.weights)
        )


def chat_rows() -> Rows:
    tokens = np.array([[5, 6, 7, 8, 9, 0]])
    segments = np.array([[0, 0, 0, 1, 1, 2]])  # two conversations, then padding
    positions = np.array([[0, 1, 2, 0, 1, 0]])
    weights = np.array([[0, 1, 1, 0, 1, 0]], np.uint8)
    return Rows(tokens, segments, np.zeros(1, np.int32), positions, weights)


def test_the_loader_trains_a_target_only_within_its_conversation_and_where_it_weighs():
    batch = BatchLoader(Rowed(chat_rows(), None), 1).batch(0)
    assert batch["positions"].tolist() == [[0, 1, 2, 0, 1]]
    # targets 6, 7 (weights 1), 8 (another conversation), 9 (weight 1), padding: masked
    assert batch["loss_mask"].tolist() == [[True, True, False, True, False]]


def test_a_text_source_beside_a_chat_source_keeps_its_positions_and_trains_every_target_in_a_document():
    text = Rows(np.arange(6)[None], np.array([[0, 0, 0, 1, 1, 1]]), np.zeros(1, np.int32))
    mixture = MixtureDataset(
        {"text": Rowed(text, 4), "chat": Rowed(chat_rows(), 4)}, {"text": 1, "chat": 1}, 2, 0
    )
    rows = mixture.read(np.arange(4))
    is_text = rows.source == 0
    assert is_text.sum() == 2
    assert rows.positions[is_text].tolist() == [list(range(6))] * 2
    assert rows.weights[is_text].tolist() == [[1] * 6] * 2
    assert rows.weights[~is_text].tolist() == chat_rows().weights.tolist() * 2
    only_text = MixtureDataset({"text": Rowed(text, 4)}, {"text": 1}, 2, 0).read(np.arange(2))
    assert only_text.positions is None and only_text.weights is None  # text alone reads as it always has
