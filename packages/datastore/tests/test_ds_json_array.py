"""A `.json` file holding one array is read as a stream (`json_array`): the same records `json.loads` gives,
however its text arrives in chunks; the same message, line and column for a malformed one; each record
handed on before the next is read; and a file that is not UTF-8 handled whole, as a document is."""

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore.build.inputs.files import describe_source
from meltemi.datastore.build.inputs.json_array import array_items, text_chunks
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy, read_documents
from meltemi.datastore.errors import InputError, InvalidUtf8Error

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text())
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
records = st.dictionaries(st.text(max_size=5), values, max_size=4)
arrays = st.lists(records | values, max_size=6)  # records as data sets hold them, and any item JSON allows
layouts = st.sampled_from(
    [{}, {"indent": 2}, {"indent": 0}, {"separators": (",", ":")}, {"ensure_ascii": False}]
)


def cut(text: str, sizes: list[int]) -> list[str]:
    """``text`` in chunks of the given sizes, in turn (the last chunk holding the rest)."""
    chunks, start = [], 0
    for size in sizes:
        chunks.append(text[start : start + size])
        start += size
    return [*chunks, text[start:]]


@settings(max_examples=300)  # pure Python, about a millisecond each: the chunk boundaries need many tries
@given(arrays, layouts, st.lists(st.integers(1, 40), max_size=30))
def test_the_records_are_json_loads_whatever_the_chunks(items, layout, sizes):
    text = json.dumps(items, **layout)
    assert list(array_items(cut(text, sizes), "a.json")) == json.loads(text)


@settings(max_examples=300)
@given(arrays, layouts, st.data(), st.sampled_from(["", " ", "x", ",", "]", "}", '"', "1", "[", "\n"]))
def test_a_malformed_array_is_said_as_json_loads_says_it(items, layout, data, tail):
    text = json.dumps(items, **layout)
    text = text[: data.draw(st.integers(1, len(text)))] + tail
    sizes = data.draw(st.lists(st.integers(1, 40), max_size=30))
    try:
        expected = json.loads(text)
    except json.JSONDecodeError as e:
        with pytest.raises(InputError) as caught:
            list(array_items(cut(text, sizes), "a.json"))
        assert str(caught.value) == f"a.json: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
    else:
        assert list(array_items(cut(text, sizes), "a.json")) == expected


def test_each_record_is_handed_on_before_the_next_is_read():
    """The first record arrives before the second chunk is asked for: the file is never held whole."""

    def chunks():
        yield '[{"text": "one"}, {"text": '
        raise AssertionError("read on before the first record was taken")

    assert next(array_items(chunks(), "a.json")) == {"text": "one"}
    with pytest.raises(InputError, match=r"^a\.json: not a JSON array of records, nor JSON Lines$"):
        list(array_items(['{"text": "one"}'], "a.json"))


def test_text_is_decoded_across_chunks_and_a_byte_that_is_not_utf8_stops_it():
    assert "".join(text_chunks(io.BytesIO('["é€𝄞"]'.encode()), size=1)) == '["é€𝄞"]'
    with pytest.raises(UnicodeDecodeError):
        list(text_chunks(io.BytesIO(b'["ok", "\xff"]'), size=4))
    with pytest.raises(UnicodeDecodeError):
        list(text_chunks(io.BytesIO("é".encode()[:1])))  # cut short at the end


@pytest.mark.parametrize("invalid_utf8", ["error", "skip", "replace"])
def test_an_array_file_that_is_not_utf8_is_an_error_skipped_or_repaired_whole(tmp_path, invalid_utf8):
    path = tmp_path / "a.json"
    path.write_bytes(b'[{"text": "kept"}, {"text": "caf\xe9"}]')
    piece, notes = describe_source(str(path)).pieces()[0], ReadNotes()
    read = read_documents(piece, ReadPolicy(invalid_utf8=invalid_utf8), notes)
    if invalid_utf8 == "error":
        with pytest.raises(InvalidUtf8Error, match=r"a\.json: not UTF-8 text at byte 32 \(0xe9"):
            list(read)
        return
    expected = [] if invalid_utf8 == "skip" else ["kept", "caf\ufffd"]
    assert list(read) == expected
    assert notes.invalid_utf8_files == {str(path)}
