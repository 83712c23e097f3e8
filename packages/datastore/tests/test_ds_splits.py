"""Held-out splits and token byte lengths: what bits-per-byte evaluation reads."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from meltemi.datastore import SequenceDataset, SequenceRange, TokenStore, hold_out, token_byte_lengths
from meltemi.datastore.sequences import Rows


class Toy:
    seq_len = 1

    def __init__(self, n):
        self.num_sequences = n

    def read(self, indices):
        return Rows(indices[:, None], indices[:, None] * 0, np.zeros(len(indices), np.int32))


@given(total=st.integers(2, 10_000), fraction=st.floats(0.001, 0.999))
def test_a_split_covers_every_sequence_once_and_holds_out_the_tail(total, fraction):
    train, held = hold_out(Toy(total), fraction)
    assert train.num_sequences + held.num_sequences == total and held.num_sequences >= 1
    assert train.num_sequences >= 1 and held.start == train.stop
    assert held.read(np.arange(held.num_sequences)).tokens.ravel().tolist() == list(range(train.stop, total))


def test_reads_outside_a_range_and_bad_splits_are_errors():
    with pytest.raises(IndexError, match=r"outside \[0, 3\) of the range \[7, 10\)"):
        SequenceRange(Toy(10), 7, 10).read(np.array([3]))
    with pytest.raises(ValueError, match="empty or outside"):
        SequenceRange(Toy(10), 5, 11)
    with pytest.raises(ValueError, match="fraction must lie in"):
        hold_out(Toy(10), 1.0)
    with pytest.raises(ValueError, match="at least 2 sequences"):
        hold_out(Toy(1), 0.5)


def test_a_held_out_range_of_a_store_reads_the_stream_tail(small_store):
    dataset = SequenceDataset(TokenStore.open(small_store), seq_len=64)
    _, held = hold_out(dataset, 0.1)
    rows = held.read(np.array([held.num_sequences - 1]))
    np.testing.assert_array_equal(rows.tokens, dataset.read(np.array([dataset.num_sequences - 1])).tokens)


def test_token_byte_lengths_sum_to_the_text_length(tokenizer_path, stdlib_files):
    lengths = token_byte_lengths(tokenizer_path)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    text = open(stdlib_files[3], encoding="utf-8").read() + "\n# naïve café — ✓\n"
    assert int(lengths[tokenizer.encode(text).ids].sum()) == len(text.encode("utf-8"))
    assert lengths[tokenizer.token_to_id("<|endoftext|>")] == 0
