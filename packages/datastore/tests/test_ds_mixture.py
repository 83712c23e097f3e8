"""MixtureDataset: exact block counts, stage appends that never rewrite the past, and per-source epochs."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import MixtureDataset, Rows, block_counts


class Numbered:
    """A toy source whose sequence `i` is just `[i]`, so reads show exactly which items were drawn."""

    def __init__(self, n: int):
        self.num_sequences, self.seq_len = n, 0

    def read(self, indices):
        return Rows(indices[:, None], np.zeros((len(indices), 1), np.int32), np.zeros(len(indices), np.int32))


weight_maps = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.floats(0.01, 100, allow_nan=False), min_size=1
)


def _mixture(stages, block_size, key=0, sizes=(7, 13, 50)):
    sources = {name: Numbered(n) for name, n in zip("abc", sizes, strict=True)}
    return MixtureDataset(sources, stages, block_size=block_size, key=key)


@given(weights=st.lists(st.floats(0, 50, allow_nan=False), min_size=1, max_size=6), block=st.integers(1, 500))
def test_block_counts_sum_to_the_block_and_round_each_quota(weights, block):
    if sum(weights) <= 0:
        weights = weights + [1.0]
    counts = block_counts(weights, block)
    quotas = np.array(weights) / sum(weights) * block
    assert counts.sum() == block
    assert np.all(np.abs(counts - quotas) < 1)


@settings(max_examples=25)
@given(weights=weight_maps, block=st.integers(1, 64), blocks=st.integers(1, 5), key=st.integers(0, 2**32))
def test_every_block_takes_exactly_its_counts_from_each_source(weights, block, blocks, key):
    mix = _mixture(weights, block, key)
    source = mix.read(np.arange(block * blocks)).source.reshape(blocks, block)
    expected = block_counts([weights.get(n, 0) for n in "abc"], block)
    for row in source:
        assert np.bincount(row, minlength=3).tolist() == expected.tolist()


@settings(max_examples=25)
@given(
    first=weight_maps,
    later=weight_maps,
    block=st.integers(1, 32),
    start_block=st.integers(1, 6),
    key=st.integers(0, 2**32),
)
def test_appending_a_stage_leaves_earlier_sequences_unchanged(first, later, block, start_block, key):
    start = start_block * block
    before = _mixture([(0, first)], block, key).read(np.arange(start))
    after = _mixture([(0, first), (start, later)], block, key)
    rows = after.read(np.arange(start))
    assert np.array_equal(rows.tokens, before.tokens) and np.array_equal(rows.source, before.source)
    tail = after.read(np.arange(start, start + block)).source
    assert (
        np.bincount(tail, minlength=3).tolist()
        == block_counts([later.get(n, 0) for n in "abc"], block).tolist()
    )


def test_a_source_that_runs_out_starts_a_fresh_epoch():
    mix = _mixture({"a": 1.0}, block_size=7)
    drawn = mix.read(np.arange(21)).tokens[:, 0]
    epochs = drawn.reshape(3, 7)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(7))
    assert not np.array_equal(epochs[0], epochs[1])


def test_reads_are_a_pure_function_of_the_positions():
    mix = _mixture({"a": 1, "b": 2, "c": 3}, 12, key=5)
    whole = mix.read(np.arange(60))
    shuffled = np.random.default_rng(0).permutation(60)
    part = mix.read(shuffled)
    assert np.array_equal(part.tokens, whole.tokens[shuffled]) and np.array_equal(
        part.source, whole.source[shuffled]
    )
    assert not np.array_equal(
        _mixture({"a": 1, "b": 2, "c": 3}, 12, key=6).read(np.arange(60)).tokens, whole.tokens
    )
    far = mix.read(np.r_[np.arange(12), 6000])
    assert np.array_equal(far.tokens[:12], whole.tokens[:12]) and np.array_equal(
        far.source[:12], whole.source[:12]
    )


def test_composition_is_in_closed_form():
    mix = _mixture([(0, {"a": 1}), (20, {"b": 1, "c": 1})], block_size=10)
    stage, drawn_before = mix.composition(np.array([0, 1, 2, 5]))
    assert stage.tolist() == [0, 0, 1, 1]
    assert drawn_before.tolist() == [[0, 0, 0], [10, 0, 0], [20, 0, 0], [20, 15, 15]]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([(5, {"a": 1})], "not a multiple of block_size"),
        ([(10, {"a": 1})], "must begin at 0"),
        ([(0, {"a": 1}), (0, {"b": 1})], "must begin at 0 and increase"),
        ([(0, {"z": 1})], r"unknown sources \['z'\]"),
        ([(0, {"a": 0})], "positive sum"),
        ([(0, {"a": -1, "b": 2})], "non-negative"),
        ([], "at least one stage"),
    ],
)
def test_bad_stages_are_errors_that_say_why(stages, message):
    with pytest.raises(ValueError, match=message):
        _mixture(stages, block_size=10)


def test_sources_with_different_sequence_lengths_are_an_error():
    short = Numbered(3)
    short.seq_len = 5
    with pytest.raises(ValueError, match="different sequence lengths"):
        MixtureDataset({"a": Numbered(3), "b": short}, {"a": 1}, block_size=4, key=0)


def test_an_endless_source_is_an_error():
    endless = Numbered(3)
    endless.num_sequences = None
    with pytest.raises(ValueError, match="'b' must be a finite, non-empty dataset"):
        MixtureDataset({"a": Numbered(3), "b": endless}, {"a": 1}, block_size=4, key=0)
