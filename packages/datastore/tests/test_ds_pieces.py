"""A large JSONL file is cut at line boundaries into pieces that many workers share; nothing else changes."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import InputError, TokenStore, build_store
from meltemi.datastore.build.inputs.files import describe_source
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy, read_documents


@settings(max_examples=40)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=60),
    split=st.integers(1, 300),
    block=st.integers(1, 64),
)
def test_pieces_cover_the_file_at_line_boundaries(tmp_path_factory, lines, split, block):
    path = tmp_path_factory.mktemp("pieces") / "data.jsonl"
    content = b"\n".join(lines) + b"\n"
    path.write_bytes(content)
    source = describe_source(str(path), split_bytes=split, block_bytes=block)
    assert source == describe_source(str(path), split_bytes=split)
    offsets = [0] + [offset for offset, _ in source.cuts]
    assert all(b - a >= split for a, b in zip(offsets, offsets[1:], strict=False))
    pieces = source.pieces()
    assert pieces[0].start == 0 and pieces[-1].stop is None
    assert all(a.stop == b.start for a, b in zip(pieces, pieces[1:], strict=False))
    for piece in pieces:
        assert piece.start == 0 or content[piece.start - 1 : piece.start] == b"\n"
        assert piece.first_line == content[: piece.start].count(b"\n") + 1
        assert piece.size > 0


def _jsonl(n: int, bad_line: int | None = None) -> str:
    rows = [json.dumps({"text": f"document number {i} " + "word " * (i % 7)}) for i in range(n)]
    if bad_line is not None:
        rows[bad_line - 1] = "{broken"
    return "\n".join(rows) + "\n"


def test_cut_pieces_give_the_same_documents_as_the_whole_file(
    tmp_path, write_files, tokenizer_path, tree_bytes
):
    files = write_files({"big.jsonl": _jsonl(300), "small.txt": "after"})
    assert len(describe_source(files[0], split_bytes=700).pieces()) > 10
    build_store(files, tokenizer_path, tmp_path / "whole", progress=False)
    build_store(files, tokenizer_path, tmp_path / "one", unit_bytes=700, progress=False)
    build_store(files, tokenizer_path, tmp_path / "two", unit_bytes=700, workers=2, progress=False)
    whole, cut = TokenStore.open(tmp_path / "whole"), TokenStore.open(tmp_path / "one")
    assert whole.num_docs == cut.num_docs == 301
    assert np.array_equal(whole.tokens[:], cut.tokens[:]) and np.array_equal(whole.offsets[:], cut.offsets[:])
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")


def test_errors_in_a_piece_name_the_line_in_the_whole_file(tmp_path, write_files, tokenizer_path):
    files = write_files({"big.jsonl": _jsonl(300, bad_line=250)})
    with pytest.raises(InputError, match=r"big\.jsonl, line 250: not valid JSON"):
        build_store(files, tokenizer_path, tmp_path / "s", unit_bytes=700, progress=False)


def test_a_piece_reads_only_its_own_lines(write_files):
    (path,) = write_files({"d.jsonl": _jsonl(50)})
    pieces = describe_source(path, split_bytes=300).pieces()
    notes = ReadNotes()
    documents = [doc for piece in pieces for doc in read_documents(piece, ReadPolicy(), notes)]
    assert documents == [json.loads(line)["text"] for line in _jsonl(50).splitlines()]


def test_a_small_corpus_is_still_cut_into_units_that_workers_can_share(stdlib_files, tokenizer_path):
    from meltemi.datastore.build.plan import MIN_UNIT_BYTES, UNITS_PER_CORPUS
    from meltemi.datastore.build.plan import plan_units as _plan
    from meltemi.datastore.build.plan import unit_groups as _groups
    from meltemi.datastore.build.request import UNIT_BYTES, BuildRequest
    from meltemi.datastore.build.units import TokenizerInfo

    sources = [describe_source(f, split_bytes=UNIT_BYTES) for f in stdlib_files]
    total = sum(s.size for s in sources)
    assert total < UNIT_BYTES * 4, "a corpus that default-sized units would leave to one or two workers"
    options = BuildRequest(("in",), tokenizer_path, "out").options()
    units = _plan(TokenizerInfo.load(tokenizer_path), sources, options, "build").units
    sizes = [sum(sources[i].size for i, *_ in unit) for unit in units]
    target = max(MIN_UNIT_BYTES, total // UNITS_PER_CORPUS)
    assert sum(sizes) == total and all(size >= target for size in sizes[:-1])
    assert len(units) >= min(UNITS_PER_CORPUS, total // MIN_UNIT_BYTES) // 2
    groups = _groups(list(range(len(units))), units, sources, UNIT_BYTES)
    assert [u for g in groups for u in g] == list(range(len(units))) and len(groups) < len(units)
