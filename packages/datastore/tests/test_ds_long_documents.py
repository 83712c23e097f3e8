"""Long documents are tokenized in pieces: the same ids as the whole, for any text, and a store built from a
document far longer than a piece is the store of its whole encoding."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from meltemi.datastore import TokenStore, build_store
from meltemi.datastore.build import long_documents
from meltemi.datastore.build import units as tokenizing
from meltemi.datastore.build.long_documents import pieces_of

FRAGMENTS = [
    "def f(x):\n", "    return x + 1\n", "  ", "\t", "\n\n\n", " " * 40, "x" * 300, "12345678",
    "héllo wörld ", "日本語のテキスト", "'s 't 're", "<|eot_id|>", "<|begin_of_text|>", "<|endoftext|>",
    "!!!???...", "  \n  ", "é", "🙂🙂", "a", " b", "\r\n",
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path) -> Tokenizer:
    return Tokenizer.from_file(tokenizer_path)


def ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=30), min_size=1, max_size=400),
    size=st.integers(1, 900),
)
def test_pieces_encode_as_the_whole(tokenizer, parts, size):
    text = "".join(parts)
    pieces = pieces_of(tokenizer, text, size=size)
    assert "".join(pieces) == text and (all(pieces) or pieces == [""])
    assert [i for piece in pieces for i in ids(tokenizer, piece)] == ids(tokenizer, text)


def test_a_long_document_is_cut_into_pieces_of_about_the_size(tokenizer):
    text = "def f(x):\n    return x + 1\n" * 2_000
    pieces = pieces_of(tokenizer, text, size=5_000)
    assert len(pieces) == pytest.approx(len(text) / 5_000, abs=1)
    assert all(abs(len(p) - 5_000) <= long_documents.WINDOW for p in pieces[:-1])


def test_a_cut_is_never_inside_an_added_token(tokenizer):
    """The pre-tokenizer, blind to added tokens, splits "<|eot_id|>" at "eot", "_" and "id": no cut there."""
    text = "x = 1<|eot_id|>" * 3_000
    pieces = pieces_of(tokenizer, text, size=1_000)
    cuts = np.cumsum([len(p) for p in pieces[:-1]])
    assert len(pieces) > 10 and not any(5 < cut % 15 < 15 for cut in cuts)
    assert [i for p in pieces for i in ids(tokenizer, p)] == ids(tokenizer, text)


def test_text_with_no_boundary_nearby_is_left_whole(tokenizer):
    text = "x" * 20_000  # one pre-token: cutting it anywhere would change its ids
    assert pieces_of(tokenizer, text, size=1_000) == [text]


@pytest.mark.parametrize(
    "change",
    [
        lambda t: setattr(t, "normalizer", normalizers.NFKC()),
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.Metaspace()),
        lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)),
    ],
    ids=["normalizer", "metaspace", "prefix-space"],
)
def test_tokenizers_whose_pieces_would_differ_are_not_cut(tokenizer_path, change):
    tokenizer = Tokenizer.from_file(tokenizer_path)
    change(tokenizer)
    text = "def f(x):\n    return x + 1\n" * 2_000
    assert pieces_of(tokenizer, text, size=1_000) == [text]


def test_a_tokenizer_without_a_pre_tokenizer_is_not_cut():
    tokenizer = Tokenizer(models.BPE())
    assert pieces_of(tokenizer, "a b " * 10_000, size=100) == ["a b " * 10_000]


def test_a_store_of_a_long_document_holds_its_whole_encoding(tmp_path, tokenizer_path, monkeypatch):
    """A document 40 pieces long, among short ones, with batches of a few pieces: every id and length is
    the whole encoding's, the EOS after each document included."""
    monkeypatch.setattr(long_documents, "PIECE_CHARACTERS", 2_000)
    monkeypatch.setattr(tokenizing, "BATCH_CHARACTERS", 8_000)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    long_text = "".join(f"def f{i}(x):\n    return x * {i}  # é\n" for i in range(2_500))
    texts = ["print('a')\n", long_text, "x = 1\n"]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    build_store(str(tmp_path / "docs.jsonl"), tokenizer_path, tmp_path / "store", progress=False)
    store = TokenStore.open(tmp_path / "store")
    assert len(pieces_of(tokenizer, long_text)) > 40
    eos = tokenizer.token_to_id("<|endoftext|>")
    for d, text in enumerate(texts):
        np.testing.assert_array_equal(store.doc(d), ids(tokenizer, text) + [eos])
    assert store.num_docs == 3
