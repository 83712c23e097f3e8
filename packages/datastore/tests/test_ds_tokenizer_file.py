"""A tokenizer file is read the same way wherever it lies: a path, file://, memory://, s3:// or gs://."""

from pathlib import Path

import pytest
from tokenizers import Tokenizer

from meltemi.datastore import TokenizerFileError, load_tokenizer, token_byte_lengths
from meltemi.datastore.storage import Directory
from meltemi.datastore.tokenizer_file import read_tokenizer_text


def test_a_tokenizer_anywhere_is_the_tokenizer_of_the_local_file(any_location, tokenizer_path):
    text = Path(tokenizer_path).read_text("utf-8")
    Directory(any_location).write_text("tokenizer.json", text)
    url = Directory(any_location).where("tokenizer.json")
    here, there = Tokenizer.from_file(tokenizer_path), load_tokenizer(url)
    sample = "def main():\n    return 42\n"
    assert there.encode(sample).ids == here.encode(sample).ids
    assert there.get_vocab(with_added_tokens=True) == here.get_vocab(with_added_tokens=True)
    assert read_tokenizer_text(url) == text
    assert (token_byte_lengths(url) == token_byte_lengths(tokenizer_path)).all()


def test_a_tokenizer_is_parsed_once_per_process_whatever_names_it(tmp_path, tokenizer_path):
    copy = tmp_path / "copy.json"
    copy.write_bytes(Path(tokenizer_path).read_bytes())
    assert load_tokenizer(tokenizer_path) is load_tokenizer(f"file://{copy}")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"{not json", "not a Hugging Face tokenizer.json"),
        (b'{"model": 3}', "not a Hugging Face tokenizer.json"),
        (b"\xff\xfe", "not a Hugging Face tokenizer.json"),
    ],
)
def test_a_missing_or_broken_tokenizer_is_one_error_naming_it(any_location, content, message):
    if content is not None:
        Directory(any_location).write_bytes("tokenizer.json", content)
    url = Directory(any_location).where("tokenizer.json")
    with pytest.raises(TokenizerFileError) as error:
        load_tokenizer(url)
    assert str(error.value).startswith(f"tokenizer {url!r}: {message}")
    assert "\n" not in str(error.value)
