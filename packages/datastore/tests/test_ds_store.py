"""Reading a store: tokens and documents, tokenizer checks, integrity errors, and sequences with segments."""

import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import (
    DatastoreError,
    IncompleteStoreError,
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


@pytest.fixture(scope="module", params=["small", "many documents"])
def any_store(request, small_store, many_docs_store) -> TokenStore:
    return TokenStore.open(small_store if request.param == "small" else many_docs_store)


@settings(max_examples=20)
@given(seq_len=st.integers(1, 700), data=st.data())
def test_segment_ids_count_documents_from_each_rows_start(any_store, seq_len, data):
    dataset = SequenceDataset(any_store, seq_len)
    indices = np.array(data.draw(st.lists(st.integers(0, len(dataset) - 1), min_size=1, max_size=20)))
    segments = dataset.read(indices).segment_ids
    positions = indices[:, None] * seq_len + np.arange(seq_len + 1)
    document = np.searchsorted(any_store.offsets[:], positions, side="right") - 1
    assert np.array_equal(segments, document - document[:, :1])


@settings(max_examples=30)
@given(length=st.integers(1, 3000), data=st.data())
def test_windows_list_exactly_the_documents_starting_inside_them(any_store, length, data):
    length = min(length, any_store.num_tokens)
    starts = np.array(
        data.draw(st.lists(st.integers(0, any_store.num_tokens - length), max_size=12)), np.int64
    )
    windows = any_store.read_windows(starts, length)
    offsets = any_store.offsets[:].astype(np.int64)
    expected = [(row, b - s) for row, s in enumerate(starts.tolist()) for b in offsets if s < b < s + length]
    found = zip(windows.boundary_rows.tolist(), windows.boundary_positions.tolist(), strict=True)
    assert list(found) == expected
    assert np.array_equal(windows.tokens, any_store.read_ranges(starts, length))
    assert windows.tokens.shape == (len(starts), length)


def test_the_many_documents_store_really_spans_several_offset_chunks(many_docs_store):
    store = TokenStore.open(many_docs_store)
    assert store.num_docs == 3000 and store.manifest["offsets"]["chunk"] == 1024
    assert store.offsets[2500] < store.offsets[2501] and len(store.offsets) == 3001
    assert store.doc(2999).size == store.offsets[3000] - store.offsets[2999]


def test_token_ranges_outside_the_store_or_empty_are_errors(store):
    with pytest.raises(IndexError, match="run past the store's"):
        store.read_ranges(np.array([store.num_tokens - 5]), 10)
    with pytest.raises(ValueError, match="at least 1 token long, got 0"):
        store.read_windows(np.array([0]), 0)
    assert store.read_windows(np.zeros(0, np.int64), 7).tokens.shape == (0, 7)


def test_sequence_indices_outside_the_dataset_are_errors(store):
    dataset = SequenceDataset(store, 128)
    with pytest.raises(IndexError, match="outside"):
        dataset.read(np.array([len(dataset)]))
    with pytest.raises(ValueError, match="fewer than one sequence"):
        SequenceDataset(store, store.num_tokens)


def test_document_and_offset_indices_out_of_range_name_the_count_and_the_index(store):
    docs = store.num_docs
    with pytest.raises(
        IndexError, match=f"doc: index {docs + 5} is out of range: the store has {docs} documents"
    ):
        store.doc(docs + 5)
    with pytest.raises(IndexError, match=f"doc: index {-docs - 1} is out of range: .* {docs} documents"):
        store.doc(-docs - 1)
    with pytest.raises(
        IndexError, match=f"offsets\\[\\]: index {docs + 1} is out of range: .* {docs + 1} elements"
    ):
        store.offsets[docs + 1]
    with pytest.raises(TypeError, match="doc: the index must be an int, got str 'a'"):
        store.doc("a")
    assert (store.doc(-1) == store.doc(docs - 1)).all() and store.doc(np.int64(2)).size > 0


def test_a_tokenizer_mismatch_names_both_tokenizers_plainly(small_store, tokenizer_path):
    stored = TokenStore.open(small_store).tokenizer_hash
    other = "0" * 64
    with pytest.raises(TokenizerMismatchError) as error:
        TokenStore.open(small_store, tokenizer=other)
    message = str(error.value)
    built = f"was built with tokenizer tokenizer.json (sha256 {stored}), "
    assert built + f"not with the tokenizer with sha256 {other}" in message
    assert "expects the expected" not in message


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


CHUNK_BYTES = 1000 * 2 + 4  # the small store's chunks: 1,000 uint16 tokens, then a CRC-32C


def flip(path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x20
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["values", "checksum"])
def test_a_corrupted_chunk_is_an_error_naming_file_and_chunk(copy, where):
    flip(copy / "tokens" / "c" / "1", 2 * CHUNK_BYTES + (10 if where == "values" else CHUNK_BYTES - 2))
    store = TokenStore.open(copy)
    assert len(store.tokens[0:100]) == 100 and len(store.tokens[11_000:12_000]) == 1000
    message = r"tokens/c/1: chunk 10 of 'tokens' \(chunk 2 of this shard\) is corrupted"
    with pytest.raises(IntegrityError, match=message):
        store.tokens[10_500:10_600]
    with pytest.raises(IntegrityError, match="chunk 10 of 'tokens'"):
        SequenceDataset(store, 1000).read(np.array([3, 10]))
    unchecked = TokenStore.open(copy, verify=False)
    assert len(unchecked.tokens[10_000:10_010]) == 10


def test_a_missing_shard_is_an_error_naming_it(copy):
    (copy / "tokens" / "c" / "1").unlink()
    store = TokenStore.open(copy)
    assert len(store.tokens[:8000]) == 8000
    with pytest.raises(
        IntegrityError, match=r"tokens/c/1: chunks 8..15 of 'tokens' cannot be read \(the file"
    ):
        store.tokens[:]


def test_a_truncated_shard_is_an_error_naming_the_chunk(copy):
    shard = copy / "tokens" / "c" / "2"
    shard.write_bytes(shard.read_bytes()[: 3 * CHUNK_BYTES + 7])
    store = TokenStore.open(copy)
    assert len(store.tokens[16_000:19_000]) == 3000
    with pytest.raises(IntegrityError, match=r"tokens/c/2: chunk 19 of 'tokens' is truncated"):
        store.tokens[16_500:19_500]


def test_corrupted_offsets_are_errors_when_read(copy):
    flip(copy / "offsets" / "c" / "0", 9)
    store = TokenStore.open(copy)
    with pytest.raises(IntegrityError, match=r"offsets/c/0: chunk 0 of 'offsets'"):
        store.doc(0)
    with pytest.raises(IntegrityError, match=r"offsets/c/0"):
        SequenceDataset(store, 100).read(np.array([0]))


def test_a_corrupted_offsets_index_is_caught_on_open(copy):
    flip(copy / "offsets_index" / "c" / "0", 3)
    with pytest.raises(IntegrityError, match=r"offsets_index/c/0: chunk 0 of 'offsets_index'"):
        TokenStore.open(copy)


def test_a_store_named_by_url_is_read_through_tensorstore(small_store, copy, store):
    remote = TokenStore.open(small_store.resolve().as_uri())
    assert type(remote._tokens.files).__name__ == "TensorStoreFiles"
    starts = np.array([0, 7_999, 123_456, store.num_tokens - 4097])
    local_windows, remote_windows = store.read_windows(starts, 4097), remote.read_windows(starts, 4097)
    for field in ("tokens", "boundary_rows", "boundary_positions"):
        assert np.array_equal(getattr(local_windows, field), getattr(remote_windows, field))
    assert np.array_equal(remote.doc(7), store.doc(7)) and remote.content_hash == store.content_hash
    flip(copy / "tokens" / "c" / "1", 10)
    with pytest.raises(IntegrityError, match=r"file://.*tokens/c/1: chunk 8 of 'tokens'"):
        TokenStore.open(copy.resolve().as_uri()).tokens[8000:8001]
    (copy / "tokens" / "c" / "2").unlink()
    with pytest.raises(IntegrityError, match=r"tokens/c/2: chunk 16 of 'tokens' cannot be read"):
        TokenStore.open(copy.resolve().as_uri(), verify=False).tokens[16_000:16_001]
    with pytest.raises(DatastoreError, match="no manifest.json"):
        TokenStore.open((copy / "tokens").resolve().as_uri())
    (copy / "manifest.json").unlink()
    (copy / ".build").mkdir()
    (copy / ".build" / "plan.json").write_text(json.dumps({"units": [[0], [1]], "command": "build again"}))
    with pytest.raises(IncompleteStoreError, match="stopped after 0 of 2 units.*build again"):
        TokenStore.open(copy.resolve().as_uri())


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
    (tmp_path / "prose.txt").write_bytes(b"hello \xff world")
    with pytest.raises(DatastoreError, match=r"^tokenizer '.*prose.txt': not a Hugging Face tokenizer.json"):
        TokenStore.open(small_store, tokenizer=tmp_path / "prose.txt")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda m: "{not json", "not readable JSON"),
        (lambda m: "[1, 2]", "not a JSON object"),
        (lambda m: json.dumps(m | {"counts": {"documents": 3}}), r"counts\.tokens is missing"),
        (
            lambda m: json.dumps(m | {"tokens": m["tokens"] | {"shard": "big"}}),
            r"tokens\.shard is missing or",
        ),
        (
            lambda m: json.dumps(m | {"tokens": m["tokens"] | {"size": 12}}),
            r"tokens\.size is 12 but the counts imply",
        ),
        (
            lambda m: json.dumps(m | {"tokens": m["tokens"] | {"chunk": 500}}),
            r"'tokens' is not the array the manifest describes: its chunk is \[1000\], "
            r"the manifest says \[500\]",
        ),
        (
            lambda m: json.dumps(m | {"tokens": m["tokens"] | {"chunk": 3000}}),
            r"the layout of 'tokens' is invalid \(a shard \(8000\) must be a positive multiple",
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
