"""Every input format, and every bad input: a clear error naming what and where, or a counted warning."""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from meltemi.datastore import EmptyCorpusError, InputError, TokenStore, build_store


def _jsonl(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _docs(out) -> list[list[int]]:
    store = TokenStore.open(out)
    return [store.doc(i).tolist() for i in range(store.num_docs)]


def test_jsonl_gz_parquet_and_text_give_the_same_documents(tmp_path, write_files, tokenizer_path):
    texts = ["def f():\n    return 1\n", "import os\n", "class A:\n    pass\n"]
    plain = write_files({f"text/{i}.txt": t for i, t in enumerate(texts)})
    jsonl = write_files({"docs.jsonl": _jsonl({"text": t, "id": i} for i, t in enumerate(texts))})
    gz = tmp_path / "docs.jsonl.gz"
    gz.write_bytes(gzip.compress(_jsonl({"text": t} for t in texts).encode()))
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"body": texts}), parquet)
    stream, file = (
        tmp_path / "data-00000-of-00001.arrow",
        tmp_path / "docs.arrow",
    )  # save_to_disk's, and IPC's
    _write_arrow(stream, pa.table({"body": texts}), stream=True)
    _write_arrow(file, pa.table({"body": texts}), stream=False)
    build_store(plain, tokenizer_path, tmp_path / "plain", progress=False)
    build_store(jsonl, tokenizer_path, tmp_path / "jsonl", progress=False)
    build_store([str(gz)], tokenizer_path, tmp_path / "gz", progress=False)
    build_store([str(parquet)], tokenizer_path, tmp_path / "pq", text_field="body", progress=False)
    build_store([str(stream)], tokenizer_path, tmp_path / "stream", text_field="body", progress=False)
    build_store([str(file)], tokenizer_path, tmp_path / "file", text_field="body", progress=False)
    expected = _docs(tmp_path / "plain")
    assert len(expected) == 3
    assert _docs(tmp_path / "jsonl") == _docs(tmp_path / "gz") == _docs(tmp_path / "pq") == expected
    assert _docs(tmp_path / "stream") == _docs(tmp_path / "file") == expected


def _write_arrow(path, table, stream: bool) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        writer = pa.ipc.new_stream(sink, table.schema) if stream else pa.ipc.new_file(sink, table.schema)
        with writer:
            writer.write_table(table, max_chunksize=2)  # several record batches


def test_globs_directories_and_urls_resolve_to_sorted_files(tmp_path, write_files, tokenizer_path):
    write_files({"b.txt": "second", "a.txt": "first", "sub/c.txt": "third"})
    inputs = tmp_path / "inputs"
    build_store([f"file://{inputs}/*.txt"], tokenizer_path, tmp_path / "glob", progress=False)
    build_store([str(inputs)], tokenizer_path, tmp_path / "dir", progress=False)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    first = tokenizer.encode("first", add_special_tokens=False).ids
    assert _docs(tmp_path / "glob")[0][:-1] == first and len(_docs(tmp_path / "glob")) == 2
    assert len(_docs(tmp_path / "dir")) == 3


def test_no_eos_leaves_documents_bare(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "hello world"})
    build_store(files, tokenizer_path, tmp_path / "s", eos=False, progress=False)
    ids = Tokenizer.from_file(tokenizer_path).encode("hello world", add_special_tokens=False).ids
    assert _docs(tmp_path / "s") == [ids]


def test_an_empty_corpus_is_an_error(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "", "b.txt": "  \n", "c.jsonl": _jsonl([{"text": ""}])})
    named = r"a\.txt, .*b\.txt, .*c\.jsonl: no non-empty document to build from \(3 files"
    with pytest.raises(EmptyCorpusError, match=named):
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    with pytest.raises(Exception, match="no manifest|does not exist"):
        TokenStore.open(tmp_path / "s")
    assert not (tmp_path / "s").exists()  # the build made it, and left it empty: removed
    (tmp_path / "kept" / "here").mkdir(parents=True)
    with pytest.raises(EmptyCorpusError):
        build_store(files, tokenizer_path, tmp_path / "kept" / "here" / "new" / "s", progress=False)
    assert not (tmp_path / "kept" / "here" / "new").exists()  # with the parents it made
    assert (tmp_path / "kept" / "here").is_dir()  # and no further
    with pytest.raises(EmptyCorpusError):
        build_store(files, tokenizer_path, tmp_path / "kept" / "here", progress=False)
    assert (tmp_path / "kept" / "here").is_dir()  # a directory that was there stays


def test_empty_files_are_skipped_and_counted(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "", "b.txt": "text", "c.txt": ""})
    report = build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    assert report.documents == 1 and report.counts["empty_files"] == 2
    assert "2 empty files" in report.summary()


def test_invalid_utf8_is_replaced_and_counted_when_asked(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": b"caf\xe9 ok", "b.jsonl": b'{"text": "x\xff"}\n{"text": "fine"}\n'})
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    assert report.documents == 3 and report.counts["invalid_utf8_documents"] == 2
    decoded = Tokenizer.from_file(tokenizer_path).decode(_docs(tmp_path / "s")[0][:-1])
    assert decoded == "caf\ufffd ok"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "ok"}\n{"text": broken\n', r"b\.jsonl, line 2: not valid JSON"),
        ('{"text": "ok"}\n\n{"body": "x"}\n', r"b\.jsonl, line 3: no 'text' field"),
        ('{"text": 3}\n', r"b\.jsonl, line 1: field 'text' is int"),
        ("[1, 2]\n", r"b\.jsonl, line 1: no 'text' field"),
    ],
)
def test_a_bad_jsonl_line_is_an_error_naming_file_and_line(
    write_files, tmp_path, tokenizer_path, content, message
):
    files = write_files({"a.txt": "fine", "b.jsonl": content})
    with pytest.raises(InputError, match=message):
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)


def test_a_parquet_file_without_the_column_is_an_error_naming_it(tmp_path, tokenizer_path):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(InputError, match=r"d\.parquet: no column 'text' \(columns: body\)"):
        build_store([str(path)], tokenizer_path, tmp_path / "s", progress=False)
    (tmp_path / "d.arrow").write_bytes(b"not arrow at all")
    with pytest.raises(InputError, match=r"d\.arrow: not a readable Arrow file"):
        build_store([str(tmp_path / "d.arrow")], tokenizer_path, tmp_path / "a", progress=False)


def test_a_document_larger_than_a_chunk_is_fine(write_files, tmp_path, tokenizer_path):
    text = "word " * 3000
    files = write_files({"big.txt": text, "small.txt": "tiny"})
    build_store(files, tokenizer_path, tmp_path / "s", chunk_tokens=64, progress=False)
    store = TokenStore.open(tmp_path / "s")
    ids = Tokenizer.from_file(tokenizer_path).encode(text, add_special_tokens=False).ids
    assert len(ids) > 64 * 10 and store.doc(0).tolist()[:-1] == ids


@pytest.mark.parametrize("missing", ["nowhere.txt", "*.nothing", "empty_dir"])
def test_a_missing_input_path_is_an_error_naming_it(tmp_path, tokenizer_path, missing):
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InputError, match=missing.replace("*", r"\*")):
        build_store([str(tmp_path / missing)], tokenizer_path, tmp_path / "s", progress=False)


def test_a_missing_or_invalid_tokenizer_is_an_error_naming_it(write_files, tmp_path):
    files = write_files({"a.txt": "x"})
    with pytest.raises(InputError, match="nope.json.*no such file"):
        build_store(files, tmp_path / "nope.json", tmp_path / "s", progress=False)
    for name, text in (("bad.json", "{}"), ("prose.txt", "hello world")):  # JSON but no tokenizer; no JSON
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError, match=rf"^tokenizer '.*{name}': not a Hugging Face tokenizer"):
            build_store(files, tmp_path / name, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_a_tokenizer_without_an_eos_token_needs_one_named_or_no_eos(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "x"})
    with pytest.raises(InputError, match="no end-of-document token.*--no-eos"):
        build_store(files, tokenizer_path, tmp_path / "s", eos_token="<missing>", progress=False)


def test_a_non_store_directory_is_never_overwritten(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "x"})
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(Exception, match="not a token store"):
        build_store(files, tokenizer_path, tmp_path / "mine", overwrite=True, progress=False)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "precious"


def test_vocabularies_over_65536_store_uint32(tmp_path, write_files):
    from tokenizers import Tokenizer as Tok
    from tokenizers import models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70_000)} | {"<|endoftext|>": 70_000}
    tokenizer = Tok(models.WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "big.json"))
    files = write_files({"a.txt": "w69999 w1 w65536"})
    build_store(files, tmp_path / "big.json", tmp_path / "s", progress=False)
    store = TokenStore.open(tmp_path / "s")
    assert store.doc(0).dtype == np.uint32 and store.doc(0).tolist() == [69999, 1, 65536, 70_000]


def test_escaped_lone_surrogates_in_jsonl_are_replaced_and_counted(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.jsonl": '{"text": "ok \\ud800 ok"}\n'})
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    assert report.documents == 1 and report.counts["invalid_utf8_documents"] == 1


def test_an_error_inside_a_worker_process_reaches_the_caller_intact(write_files, tmp_path, tokenizer_path):
    files = write_files({"a.txt": "fine", "b.jsonl": '{"text": "ok"}\nnot json\n', "c.txt": "also fine"})
    with pytest.raises(InputError, match=r"b\.jsonl, line 2: not valid JSON"):
        build_store(files, tokenizer_path, tmp_path / "s", workers=2, unit_bytes=1, progress=False)


def test_any_fsspec_url_is_an_input(tmp_path, tokenizer_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe({"/ds-test/b.jsonl": b'{"text": "two"}\n', "/ds-test/a.jsonl": b'{"text": "one"}\n'})
    report = build_store(["memory://ds-test/*.jsonl"], tokenizer_path, tmp_path / "s", progress=False)
    manifest = TokenStore.open(tmp_path / "s").manifest
    assert report.documents == 2
    assert [s["url"] for s in manifest["sources"]] == [
        "memory:///ds-test/a.jsonl",
        "memory:///ds-test/b.jsonl",
    ]


def test_credentials_in_an_input_url_stay_out_of_errors_and_records(tmp_path, tokenizer_path):
    with pytest.raises(InputError) as error:
        build_store(["ftp://alice:hunter2@127.0.0.1:9/none.jsonl"], tokenizer_path, tmp_path / "s")
    assert "hunter2" not in str(error.value) and "alice" not in str(error.value)
