"""Reading a store: tokens and documents, tokenizer checks, integrity errors, and sequences with segments."""

import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import (
    DatastoreError,
    IntegrityError,
    SequenceDataset,
    TokenizerMismatchError,
    TokenStore,
    corpora,
)


@pytest.fixture(scope="module")
def store(small_store) -> TokenStore:
    return TokenStore.open(small_store)


@pytest.fixture(scope="module")
def stream(small_store) -> np.ndarray:
    import zarr

    return zarr.open_array(small_store / "tokens", mode="r")[:]


@given(data=st.data())
def test_token_slices_equal_the_stream(store, stream, data):
    a = data.draw(st.integers(0, store.num_tokens))
    b = data.draw(st.integers(a, min(store.num_tokens, a + 5000)))
    assert np.array_equal(store.tokens[a:b], stream[a:b])
    assert store.tokens[a - 1] == stream[a - 1]


def test_documents_partition_the_stream(store, stream):
    docs = [store.doc(i) for i in range(store.num_docs)]
    assert np.array_equal(np.concatenate(docs), stream)
    assert store.doc(-1).tolist() == docs[-1].tolist()
    with pytest.raises(IndexError):
        store.doc(store.num_docs)


@settings(max_examples=20)
@given(seq_len=st.integers(1, 700), data=st.data())
def test_sequence_dataset_reassembles_the_token_stream_exactly(store, stream, seq_len, data):
    dataset = SequenceDataset(store, seq_len)
    assert len(dataset) == (store.num_tokens - 1) // seq_len
    count = data.draw(st.integers(1, min(len(dataset), 40)))
    first = data.draw(st.integers(0, len(dataset) - count))
    rows = dataset.read(np.arange(first, first + count))
    inputs = rows.tokens[:, :-1].reshape(-1)
    start = first * seq_len
    assert np.array_equal(inputs, stream[start : start + count * seq_len])
    assert np.array_equal(rows.tokens[:, 1:].reshape(-1), stream[start + 1 : start + count * seq_len + 1])


@settings(max_examples=20)
@given(seq_len=st.integers(1, 700), data=st.data())
def test_segment_ids_count_documents_from_each_rows_start(store, seq_len, data):
    dataset = SequenceDataset(store, seq_len)
    indices = np.array(data.draw(st.lists(st.integers(0, len(dataset) - 1), min_size=1, max_size=20)))
    segments = dataset.read(indices).segment_ids
    positions = indices[:, None] * seq_len + np.arange(seq_len + 1)
    document = np.searchsorted(store.offsets, positions, side="right") - 1
    assert np.array_equal(segments, document - document[:, :1])


def test_sequence_indices_outside_the_dataset_are_errors(store):
    dataset = SequenceDataset(store, 128)
    with pytest.raises(IndexError, match="outside"):
        dataset.read(np.array([len(dataset)]))
    with pytest.raises(ValueError, match="fewer than one sequence"):
        SequenceDataset(store, store.num_tokens)


def test_a_tokenizer_mismatch_names_both_tokenizers(small_store, tmp_path, tokenizer_path):
    other = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tmp_path / "other.json")
    TokenStore.open(small_store, tokenizer=tokenizer_path)
    TokenStore.open(small_store, tokenizer=TokenStore.open(small_store).tokenizer_hash)
    with pytest.raises(TokenizerMismatchError) as error:
        TokenStore.open(small_store, tokenizer=other)
    message = str(error.value)
    assert "tokenizer.json" in message and "other.json" in message
    assert TokenStore.open(small_store).tokenizer_hash in message


@pytest.fixture
def copy(small_store, tmp_path):
    return shutil.copytree(small_store, tmp_path / "copy")


def test_a_corrupted_chunk_is_an_error_naming_file_and_chunk(copy):
    chunk_file = copy / "tokens" / "c" / "3"
    data = bytearray(chunk_file.read_bytes())
    data[10] ^= 0xFF
    chunk_file.write_bytes(bytes(data))
    store = TokenStore.open(copy)
    assert store.tokens[0:100] is not None
    with pytest.raises(IntegrityError, match=r"tokens/c/3: chunk 3 of 'tokens' is corrupted"):
        store.tokens[2500:3500]
    with pytest.raises(IntegrityError, match="chunk 3"):
        SequenceDataset(store, 1000).read(np.array([3]))
    unchecked = TokenStore.open(copy, verify=False)
    assert len(unchecked.tokens[3000:3010]) == 10


def test_a_missing_chunk_is_an_error_naming_it(copy):
    (copy / "tokens" / "c" / "1").unlink()
    with pytest.raises(IntegrityError, match=r"tokens/c/1: chunk 1 of 'tokens' is missing"):
        TokenStore.open(copy).tokens[:]


def test_a_truncated_chunk_is_an_error_naming_it(copy):
    chunk_file = copy / "tokens" / "c" / "2"
    chunk_file.write_bytes(chunk_file.read_bytes()[:7])
    with pytest.raises(IntegrityError, match=r"tokens/c/2"):
        TokenStore.open(copy).tokens[1500:2500]


def test_corrupted_offsets_are_caught_on_open(copy):
    chunk_file = copy / "offsets" / "c" / "0"
    data = bytearray(chunk_file.read_bytes())
    data[9] ^= 0x01
    chunk_file.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"offsets/c/0"):
        TokenStore.open(copy)


def test_opening_something_that_is_not_a_store_says_so(tmp_path, copy):
    with pytest.raises(DatastoreError, match="does not exist"):
        TokenStore.open(tmp_path / "absent")
    with pytest.raises(DatastoreError, match="no manifest.json"):
        TokenStore.open(tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(manifest | {"format_version": 99}))
    with pytest.raises(DatastoreError, match="format 99"):
        TokenStore.open(copy)


def test_an_expected_tokenizer_that_is_neither_file_nor_hash_is_an_error(small_store, tmp_path):
    with pytest.raises(DatastoreError, match="neither a tokenizer.json file nor a SHA-256"):
        TokenStore.open(small_store, tokenizer=tmp_path / "absent.json")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda m: "{not json", "not readable JSON"),
        (lambda m: "[1, 2]", "not a JSON object"),
        (lambda m: json.dumps(m | {"counts": {"documents": 3}}), r"counts\.tokens is missing"),
        (
            lambda m: json.dumps(m | {"tokens": m["tokens"] | {"checksums": m["tokens"]["checksums"][:-1]}}),
            r"checksums for the \d+ chunks of 'tokens'",
        ),
    ],
)
def test_a_damaged_manifest_is_an_error_naming_it(copy, damage, message):
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(damage(manifest))
    with pytest.raises(DatastoreError, match=message):
        TokenStore.open(copy)


def test_missing_array_metadata_is_an_integrity_error(copy):
    (copy / "tokens" / "zarr.json").unlink()
    with pytest.raises(IntegrityError, match=r"tokens/zarr.json"):
        TokenStore.open(copy)


def test_a_single_sequence_by_index_matches_the_batched_read(store):
    dataset = SequenceDataset(store, 100)
    rows = dataset.read(np.array([5, len(dataset) - 1]))
    assert np.array_equal(dataset[5]["tokens"], rows.tokens[0])
    assert np.array_equal(dataset[-1]["segment_ids"], rows.segment_ids[1])
    with pytest.raises(IndexError):
        dataset[len(dataset)]
