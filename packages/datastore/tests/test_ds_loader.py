"""batch(step): every process's rows together are the single-process batch; schedules; prefetching."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import (
    BatchLoader,
    BatchSchedule,
    MixtureDataset,
    SequenceDataset,
    ShuffledDataset,
    TokenStore,
)


@pytest.fixture(scope="module")
def dataset(small_store):
    store = TokenStore.open(small_store)
    sources = {"x": SequenceDataset(store, 32), "y": SequenceDataset(store, 32)}
    return {
        "shuffled": ShuffledDataset(sources["x"], key=11),
        "era": ShuffledDataset(sources["x"], key=11, window=100),
        "mixture": MixtureDataset(sources, [(0, {"x": 1}), (64, {"x": 1, "y": 3})], block_size=16, key=2),
    }


@settings(max_examples=20)
@given(
    kind=st.sampled_from(["shuffled", "era", "mixture"]),
    process_count=st.sampled_from([1, 2, 4, 8]),
    per_process=st.integers(1, 6),
    step=st.integers(0, 10_000),
)
def test_the_union_of_all_processes_rows_is_the_single_process_batch(
    dataset, kind, process_count, per_process, step
):
    size = per_process * 8
    whole = BatchLoader(dataset[kind], size).batch(step)
    parts = [BatchLoader(dataset[kind], size, p, process_count).batch(step) for p in range(process_count)]
    for name, value in whole.items():
        assert np.array_equal(np.concatenate([part[name] for part in parts]), value), name


def test_batches_hold_inputs_targets_segments_and_sources(dataset):
    batch = BatchLoader(dataset["mixture"], 16).batch(5)
    assert batch["input_ids"].shape == batch["targets"].shape == batch["segment_ids"].shape == (16, 32)
    assert np.array_equal(batch["input_ids"][:, 1:], batch["targets"][:, :-1])
    assert batch["source"].shape == (16,) and set(batch["source"].tolist()) <= {0, 1}
    assert np.all(np.diff(batch["segment_ids"], axis=1) >= 0) and np.all(batch["segment_ids"][:, 0] == 0)


@given(
    stages=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 64)), min_size=1, max_size=4),
    step=st.integers(0, 300),
)
def test_schedule_rows_are_contiguous_and_never_overlap(stages, step):
    starts = np.cumsum([0] + [length for length, _ in stages[:-1]])
    schedule = BatchSchedule([(int(s), size) for s, (_, size) in zip(starts, stages, strict=True)])
    brute = sum(schedule.size(s) for s in range(step))
    assert schedule.first_row(step) == brute


def test_a_finite_dataset_that_runs_out_says_how_to_loop(small_store):
    data = SequenceDataset(TokenStore.open(small_store), 32)
    loader = BatchLoader(data, 64)
    loader.batch(0)
    with pytest.raises(IndexError, match="ShuffledDataset"):
        loader.batch(len(data) // 64 + 1)


def test_a_batch_that_does_not_split_over_processes_is_an_error(dataset):
    with pytest.raises(ValueError, match="does not split over 4 processes"):
        BatchLoader(dataset["shuffled"], 6, 0, 4).batch(0)
    with pytest.raises(ValueError, match="process_index"):
        BatchLoader(dataset["shuffled"], 8, 4, 4)


def test_prefetched_batches_equal_direct_ones_and_resume_anywhere(dataset):
    loader = BatchLoader(dataset["mixture"], [(0, 8), (3, 16)], prefetch=2)
    direct = [loader.batch(s) for s in range(2, 7)]
    fetched = list(loader.iterate(2, 7))
    assert [s for s, _ in fetched] == list(range(2, 7))
    for (_, got), want in zip(fetched, direct, strict=True):
        assert all(np.array_equal(got[k], want[k]) for k in want)
    endless = loader.iterate(4)
    assert next(endless)[0] == 4
    endless.close()


def test_an_error_in_the_prefetcher_reaches_the_consumer(small_store):
    loader = BatchLoader(SequenceDataset(TokenStore.open(small_store), 32), 256)
    with pytest.raises(IndexError, match="needs sequence"):
        for _ in loader.iterate(0):
            pass


def test_numpy_integers_are_batch_sizes_and_bad_schedules_are_errors(dataset):
    assert BatchLoader(dataset["shuffled"], np.int64(8)).batch(0)["input_ids"].shape == (8, 32)
    for bad, message in [([(1, 8)], "start at step 0"), ([(0, 8), (0, 4)], "must increase"), (0, "positive")]:
        with pytest.raises(ValueError, match=message):
            BatchSchedule(bad)


def test_the_loss_mask_drops_exactly_the_targets_that_start_a_document(small_store):
    store = TokenStore.open(small_store)
    seq_len, rows = 32, 200  # 6,400 tokens per step: several documents end inside step 1
    batch = BatchLoader(SequenceDataset(store, seq_len), rows).batch(step=1)
    # Row i of step 1 is sequence rows + i: its target t is token rows*seq_len + i*seq_len + t + 1.
    target_positions = (rows + np.arange(rows))[:, None] * seq_len + np.arange(seq_len)[None, :] + 1
    doc_starts = np.array([store.offsets[d] for d in range(1, store.num_docs)])
    expected = ~np.isin(target_positions, doc_starts)
    assert batch["loss_mask"].dtype == bool and (~expected).any()
    np.testing.assert_array_equal(batch["loss_mask"], expected)
