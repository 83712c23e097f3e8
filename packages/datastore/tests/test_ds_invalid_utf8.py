"""Documents that are not UTF-8 text: an error naming the file and byte by default (`invalid_utf8="error"`),
or, when asked, left out (`"skip"`) or repaired (`"replace"`), counted in the summary and the manifest.

A document is a whole plain-text file, one JSONL line, or one Parquet row.
"""

import gzip
import random
import struct
import tempfile
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from meltemi.datastore import (
    BadLineError,
    EmptyCorpusError,
    IncompleteStoreError,
    InputError,
    InvalidUtf8Error,
    Remedy,
    SourceChangedError,
    TokenStore,
    Way,
    build_store,
)
from meltemi.datastore.build.request import BUILD_FLAGS
from meltemi.datastore.cli import main
from meltemi.datastore.errors import COMMAND_LINE
from meltemi.datastore.progress import ProgressBar


def _png() -> bytes:
    """A real 1x1 PNG: its signature starts with 0x89, and its header chunk holds NUL bytes."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress(b"\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _elf() -> bytes:
    """The start of an x86-64 ELF executable: a header full of NUL bytes, then machine code."""
    ident = b"\x7fELF\x02\x01\x01" + b"\x00" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, 0x401000, 64, 0, 0, 64, 56, 1, 64, 0, 0)
    return header + b"\x48\x89\xe5\x31\xc0\xc3"  # mov rbp, rsp; xor eax, eax; ret


def _docs(out) -> list[list[int]]:
    store = TokenStore.open(out)
    return [store.doc(i).tolist() for i in range(store.num_docs)]


def _offset_of_first_bad_byte(data: bytes) -> int:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    raise AssertionError("the data is valid UTF-8")


BINARY = {
    "image.png": _png(),
    "program": _elf(),
    "random.bin": random.Random(0).randbytes(200_000),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_a_binary_file_is_an_error_naming_it_and_the_byte_and_no_store_is_made(
    write_files, tmp_path, tokenizer_path, name
):
    data = BINARY[name]
    files = write_files({"good.txt": "def f(): pass\n", name: data})
    with pytest.raises(InvalidUtf8Error) as error:
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    said = str(error.value)
    offset = _offset_of_first_bad_byte(data)
    assert f"{name}: not UTF-8 text at byte {offset} (0x{data[offset]:02x}" in said, said
    assert "--invalid-utf8 skip" in said and "--invalid-utf8 replace" in said
    assert error.value.file.endswith(name) and error.value.offset == offset and error.value.line is None
    assert not (tmp_path / "s" / "manifest.json").exists()
    with pytest.raises(IncompleteStoreError, match=f"at a bad input: .*{name}: not UTF-8 text"):
        TokenStore.open(tmp_path / "s")


def test_the_error_reaches_the_caller_intact_from_a_worker_process(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "fine", "b.png": _png(), "c.txt": "also fine"})
    with pytest.raises(
        InvalidUtf8Error, match=r"b\.png: not UTF-8 text at byte 0 .*--invalid-utf8 skip"
    ) as error:
        build_store(files, tokenizer_path, tmp_path / "s", workers=2, unit_bytes=1, progress=False)
    assert (error.value.file, error.value.offset) == (files[1], 0)


def test_a_jsonl_line_that_is_not_utf8_is_an_error_naming_file_line_and_byte(
    write_files, tmp_path, tokenizer_path
):
    lines = [b'{"text": "one"}\n', b'{"text": "two"}\n', b'{"text": "caf\xe9"}\n']
    files = write_files({"d.jsonl": b"".join(lines)})
    with pytest.raises(InvalidUtf8Error) as error:
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    offset = len(lines[0]) + len(lines[1]) + lines[2].index(b"\xe9")
    assert f"d.jsonl, line 3: not UTF-8 text at byte {offset} (0xe9" in str(error.value)
    assert (error.value.line, error.value.offset) == (3, offset)


def test_a_gzipped_jsonl_line_that_is_not_utf8_names_the_byte_of_the_uncompressed_text(
    tmp_path, tokenizer_path
):
    text = b'{"text": "one"}\n{"text": "\xff"}\n'
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress(text))
    with pytest.raises(
        InvalidUtf8Error, match=r"d\.jsonl\.gz, line 2: not UTF-8 text at byte 26 of the uncompressed"
    ):
        build_store([str(path)], tokenizer_path, tmp_path / "s", progress=False)


def test_a_file_named_jsonl_gz_that_is_not_gzip_is_an_error_naming_it(tmp_path, tokenizer_path):
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(_png())
    with pytest.raises(InputError, match=r"d\.jsonl\.gz: not a gzip file"):
        build_store([str(path)], tokenizer_path, tmp_path / "s", progress=False)


@pytest.mark.parametrize("column", [pa.binary(), pa.string(), pa.large_string()])
def test_a_parquet_row_that_is_not_utf8_is_an_error_naming_file_and_row(tmp_path, tokenizer_path, column):
    """Arrow's strings are not checked when read: a Parquet string column can hold invalid UTF-8 too."""
    values = pa.array([b"fine", b"", b"caf\xe9 au lait", b"ok"], pa.binary()).cast(column, safe=False)
    pq.write_table(pa.table({"text": values}), tmp_path / "d.parquet")
    with pytest.raises(InvalidUtf8Error, match=r"d\.parquet, row 3: not UTF-8 text at byte 3 of the row"):
        build_store([str(tmp_path / "d.parquet")], tokenizer_path, tmp_path / "s", progress=False)
    report = build_store(
        [str(tmp_path / "d.parquet")], tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False
    )
    assert report.documents == 3 and report.counts["invalid_utf8_documents"] == 1
    decoded = Tokenizer.from_file(tokenizer_path).decode(_docs(tmp_path / "s")[1][:-1])
    assert decoded == "caf\ufffd au lait"


def test_an_escaped_lone_surrogate_is_not_text_either(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.jsonl": '{"text": "fine"}\n{"text": "ok \\ud800 ok"}\n'})
    with pytest.raises(InvalidUtf8Error, match=r"a\.jsonl, line 2 \(byte 17\): .*lone surrogate"):
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    assert report.counts["invalid_utf8_documents"] == 1
    assert Tokenizer.from_file(tokenizer_path).decode(_docs(tmp_path / "s")[1][:-1]) == "ok \ufffd ok"


def test_skip_leaves_out_each_document_that_is_not_utf8_and_says_how_many(
    write_files, tmp_path, tokenizer_path
):
    jsonl = b'{"text": "x\xff"}\n{"text": "kept"}\n{"text": "\xfe"}\n'
    files = write_files({"a.txt": "first", "b.png": _png(), "c.jsonl": jsonl})
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="skip", progress=False)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    assert [tokenizer.decode(doc[:-1]) for doc in _docs(tmp_path / "s")] == ["first", "kept"]
    assert report.counts["invalid_utf8_documents"] == 3
    assert "3 documents with invalid UTF-8 skipped" in report.summary()
    manifest = TokenStore.open(tmp_path / "s").manifest
    assert manifest["invalid_utf8"] == "skip" and manifest["counts"]["invalid_utf8_documents"] == 3
    assert manifest["invalid_utf8_files"] == [files[1], files[2]]
    again = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="skip", progress=False)
    assert again.already_built and "3 documents with invalid UTF-8 skipped" in again.summary()


def test_replace_is_counted_in_the_summary(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": b"caf\xe9"})
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    assert "1 document with invalid UTF-8 replaced" in report.summary()
    assert TokenStore.open(tmp_path / "s").manifest["invalid_utf8"] == "replace"


def test_when_every_document_is_skipped_the_error_says_so(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.png": _png(), "b.txt": ""})
    with pytest.raises(
        EmptyCorpusError, match=r"no non-empty document .*1 empty file, 1 document with invalid"
    ):
        build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="skip", progress=False)


def test_a_stopped_build_keeps_its_work_and_resumes_with_another_policy(
    write_files, tmp_path, tokenizer_path, monkeypatch
):
    import meltemi.datastore.build.builder as build

    files = write_files({"a.txt": "first " * 50, "b.txt": "second " * 50, "c.png": _png(), "d.txt": "last"})
    out = tmp_path / "s"
    with pytest.raises(InvalidUtf8Error):
        build_store(files, tokenizer_path, out, unit_bytes=1, progress=False)
    assert len(list((out / ".build" / "parts").glob("*.json"))) == 2
    tokenized = []

    def spy(build_dir, jobs, *args, **kwargs):
        tokenized.extend(unit for unit, _ in jobs)
        return tokenize_units(build_dir, jobs, *args, **kwargs)

    tokenize_units = build.tokenize_units
    monkeypatch.setattr(build, "tokenize_units", spy)
    report = build_store(files, tokenizer_path, out, unit_bytes=1, invalid_utf8="skip", progress=False)
    assert tokenized == [2, 3]
    assert report.documents == 3 and report.counts["invalid_utf8_documents"] == 1
    build_store(files, tokenizer_path, tmp_path / "fresh", unit_bytes=1, invalid_utf8="skip", progress=False)
    assert _docs(out) == _docs(tmp_path / "fresh")


def test_parts_made_under_another_policy_are_redone_so_the_store_is_what_a_fresh_build_makes(
    write_files, tmp_path, tokenizer_path
):
    files = write_files({"a.txt": b"caf\xe9 " * 20, "b.jsonl": '{"text": "x"}\nnot json\n'})
    out = tmp_path / "s"
    with pytest.raises(BadLineError):
        build_store(files, tokenizer_path, out, unit_bytes=1, invalid_utf8="skip", progress=False)
    resumed = build_store(
        files, tokenizer_path, out, unit_bytes=1, invalid_utf8="replace", skip_bad_lines=True, progress=False
    )
    fresh = build_store(
        files, tokenizer_path, tmp_path / "f", unit_bytes=1, invalid_utf8="replace", skip_bad_lines=True,
        progress=False,
    )  # fmt: skip
    assert _docs(out) == _docs(tmp_path / "f") and resumed.documents == fresh.documents == 2


def test_a_finished_store_made_under_another_policy_is_not_reused_silently(
    write_files, tmp_path, tokenizer_path
):
    files = write_files({"a.txt": b"caf\xe9", "b.txt": "fine"})
    out = tmp_path / "s"
    build_store(files, tokenizer_path, out, invalid_utf8="replace", progress=False)
    with pytest.raises(
        SourceChangedError,
        match="1 document with invalid UTF-8 replaced.*--invalid-utf8 replace.*--overwrite",
    ):
        build_store(files, tokenizer_path, out, progress=False)
    report = build_store(files, tokenizer_path, out, invalid_utf8="skip", overwrite=True, progress=False)
    assert report.documents == 1 and TokenStore.open(out).manifest["invalid_utf8"] == "skip"
    clean = write_files({"c.txt": "all text"})
    build_store(clean, tokenizer_path, tmp_path / "clean", invalid_utf8="replace", progress=False)
    assert build_store(clean, tokenizer_path, tmp_path / "clean", progress=False).already_built


def test_the_command_line_has_the_policy_and_prints_the_count(write_files, tmp_path, tokenizer_path, capsys):
    files = write_files({"a.txt": "fine", "b.png": _png()})
    argv = ["build", "--input", *files, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {files[1]}: not UTF-8 text at byte 0 (0x89") and err.count("\n") == 1
    assert main([*argv, "--invalid-utf8", "skip"]) == 0
    assert "1 document with invalid UTF-8 skipped" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv, "--invalid-utf8", "ignore"])


def test_the_progress_bar_counts_them():
    class Terminal:
        text = ""

        def isatty(self):
            return True

        def write(self, text):
            self.text += text

        def flush(self):
            pass

    stream = Terminal()
    with ProgressBar(2, "tokenizing", stream=stream, invalid_utf8="skip") as bar:
        bar.advance(1, 10, 100, invalid_utf8=3)
    assert "3 with invalid UTF-8 skipped" in stream.text


class _AppWords:
    """Another program's flags for some of `build_store`'s options (as the trainer words them)."""

    flags = {"invalid_utf8": "--data.invalid_utf8 {}", "text_field": "--data.text_field {}",
             "overwrite": "--data.rebuild_corpus", "skip_bad_lines": "--data.skip_bad_lines {}"}  # fmt: skip

    def flag(self, keyword, value):
        spelled = self.flags.get(keyword)
        return None if spelled is None else spelled.format(str(value).lower() if value is True else value)

    def rerun(self, changes, request):
        flags = [self.flag(keyword, value) for keyword, value in changes.items()]
        return None if None in flags else "run the same command again" + "".join(f" with {f}" for f in flags)


def test_an_error_carries_its_remedies_as_data(write_files, tmp_path, tokenizer_path):
    """A bad input's error says what went wrong (`cause`) and what would fix it (`remedies`: `build_store`
    keywords, and the build they would run again), not a command line's words."""
    png = write_files({"a.png": _png()})
    with pytest.raises(InvalidUtf8Error) as stopped:
        build_store(png, tokenizer_path, tmp_path / "s", progress=False)
    error = stopped.value
    assert error.cause.endswith("a.png: not UTF-8 text at byte 0 (0x89: invalid start byte)"), error.cause
    assert "--" not in error.cause and error.request.inputs == tuple(png)
    assert [way.settings for remedy in error.remedies for way in remedy.ways] == [
        {"invalid_utf8": "skip"},
        {"invalid_utf8": "replace"},
    ]
    assert all(remedy.rerun for remedy in error.remedies)
    assert str(error) == error.say(COMMAND_LINE) and "--invalid-utf8 skip" in str(error)
    with pytest.raises(IncompleteStoreError) as half_built:  # the record keeps them as data too
        TokenStore.open(tmp_path / "s")
    assert half_built.value.remedies == error.remedies and half_built.value.request == error.request
    lines = write_files({"b.jsonl": '{"body": "x"}\n'})
    with pytest.raises(BadLineError) as bad_line:
        build_store(lines, tokenizer_path, tmp_path / "t", progress=False)
    another, fix, skip = bad_line.value.remedies
    assert another.ways == (Way({"text_field": "FIELD"}),) and not another.rerun
    assert fix.rerun and fix.ways == () and skip.ways == (Way({"skip_bad_lines": True}),)


def test_another_program_words_the_remedies_with_its_own_flags(write_files, tmp_path, tokenizer_path):
    """`worded` says the same error in another program's flags; remedies it has no flag for are left out,
    and the datastore's command (`str`) is untouched."""
    ours = [flag.spelling for flag in BUILD_FLAGS] + ["--no-eos", "python -m"]

    def said(**kwargs) -> str:
        with pytest.raises(Exception) as error:
            build_store(progress=False, **kwargs)
        text = str(error.value.worded(_AppWords()))
        assert not [flag for flag in ours if flag in text], text
        assert type(error.value.worded(_AppWords())) is type(error.value)
        return text

    png = write_files({"a.png": _png()})
    text = said(inputs=png, tokenizer=tokenizer_path, out=tmp_path / "1")
    assert "run the same command again with --data.invalid_utf8 skip" in text
    assert "run the same command again with --data.invalid_utf8 replace" in text
    with pytest.raises(IncompleteStoreError) as half_built:
        TokenStore.open(tmp_path / "1")
    assert "--data.invalid_utf8 skip" in str(half_built.value.worded(_AppWords()))
    assert "--invalid-utf8 skip" in str(half_built.value)
    bad_line = write_files({"b.jsonl": '{"body": "x"}\n'})
    text = said(inputs=bad_line, tokenizer=tokenizer_path, out=tmp_path / "2")
    assert "pass --data.text_field FIELD to name another" in text
    assert "Fix that line and run the same command again (the build starts over" in text
    assert "run the same command again with --data.skip_bad_lines true" in text
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "d.parquet")
    text = said(inputs=[str(tmp_path / "d.parquet")], tokenizer=tokenizer_path, out=tmp_path / "3")
    assert "pass --data.text_field FIELD" in text
    text = said(inputs=png, tokenizer=tokenizer_path, out=tmp_path / "4", eos_token="<none>")
    assert "no end-of-document token" in text
    good = write_files({"c.txt": "fine"})
    build_store(good, tokenizer_path, tmp_path / "5", progress=False)
    text = said(inputs=[*good, *write_files({"d.txt": "more"})], tokenizer=tokenizer_path, out=tmp_path / "5")
    assert "pass --data.rebuild_corpus to rebuild it" in text


def test_the_command_line_spells_each_remedys_keyword_as_its_build_flag():
    """`str(error)` names the flags `python -m meltemi.datastore build` has: its rule for a keyword is the
    flag's spelling in `BUILD_FLAGS`."""
    remedied = {"text_field": "FIELD", "skip_bad_lines": True, "invalid_utf8": "skip", "overwrite": True,
                "eos_token": "TOKEN", "eos": False, "subset": "NAME"}  # fmt: skip
    by_field = {flag.field: flag for flag in BUILD_FLAGS}
    for keyword, value in remedied.items():
        assert COMMAND_LINE.flag(keyword, value) == " ".join(by_field[keyword].say(value)), keyword
    remedy = Remedy("; pass {}", (Way({"eos_token": "TOKEN"}), Way({"eos": False})))
    assert (
        remedy.say(COMMAND_LINE) == "; pass --eos-token TOKEN or --no-eos" and remedy.say(_AppWords()) == ""
    )


def _text_file(data: bytes) -> bytes:
    return data


def _jsonl_line(data: bytes) -> bytes:
    """A JSONL line whose text is `data` (JSON-escaped where it must be, raw elsewhere, so bad bytes stay)."""
    escaped = b"".join(b"\\u%04x" % byte if byte < 0x20 or byte in b'"\\' else bytes([byte]) for byte in data)
    return b'{"text": "' + escaped + b'"}\n'


def _strict(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


documents = st.lists(
    st.one_of(st.binary(max_size=40), st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass"))),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("form", ["text", "jsonl"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=documents)
def test_for_any_bytes_each_policy_does_what_it_says(tokenizer_path, form, docs):
    """`error` raises iff some document is not UTF-8; `replace` builds and counts exactly those; `skip`
    stores exactly the others."""
    tokenizer = Tokenizer.from_file(tokenizer_path)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if form == "text":
            files = []
            for i, data in enumerate([b"anchor", *docs]):
                (root / f"{i:02d}.txt").write_bytes(data)
                files.append(str(root / f"{i:02d}.txt"))
            texts = [_strict(d) for d in [b"anchor", *docs] if d.strip()]
        else:
            (root / "d.jsonl").write_bytes(b"".join(_jsonl_line(d) for d in [b"anchor", *docs]))
            files = [str(root / "d.jsonl")]
            texts = [_strict(d) for d in [b"anchor", *docs] if d]
        bad = sum(text is None for text in texts)

        def build(policy):
            return build_store(files, tokenizer_path, root / policy, invalid_utf8=policy, progress=False)

        if bad:
            with pytest.raises(InvalidUtf8Error):
                build("error")
        else:
            assert build("error").documents == len(texts)
        assert build("replace").counts.get("invalid_utf8_documents", 0) == bad
        assert build("skip").counts.get("invalid_utf8_documents", 0) == bad
        stored = [tokenizer.decode(doc[:-1]) for doc in _docs(root / "skip")]
        expected = [tokenizer.decode(tokenizer.encode(t, add_special_tokens=False).ids) for t in texts if t]
        assert stored == expected
