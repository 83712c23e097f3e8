"""Inputs compressed whole (`.jsonl.zst` as DCLM ships, `.json.gz` as Dolma does, `.bz2`, `.xz`) read as their
uncompressed bytes do, in text and chat builds; a damaged one is an error naming it."""

import bz2
import functools
import gzip
import http.server
import json
import lzma
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore import InputError, InvalidUtf8Error, TokenStore, build_store
from meltemi.datastore.build.inputs.compression import CODECS
from meltemi.datastore.build.inputs.dataset_files import training_files
from meltemi.datastore.build.inputs.files import describe_source
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy, read_documents
from meltemi.datastore.chat.conversations import read_conversations
from meltemi.datastore.errors import TokenizerFileError
from meltemi.datastore.testing.proxies import serve_on_loopback


def _zstd(data: bytes) -> bytes:
    return pa.compress(data, codec="zstd", asbytes=True)


COMPRESS = {"gzip": gzip.compress, "zstd": _zstd, "bz2": bz2.compress, "xz": lzma.compress}
SUFFIX = {codec: suffix for suffix, codec in reversed(CODECS.items())}  # .zst for zstd, not .zstd


def _jsonl(records) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _documents(path, policy=None) -> list[str]:
    policy, notes = policy or ReadPolicy(), ReadNotes()
    return [d for piece in describe_source(str(path)).pieces() for d in read_documents(piece, policy, notes)]


@settings(max_examples=25, deadline=None)
@given(
    texts=st.lists(st.text(min_size=1).filter(str.strip), min_size=1, max_size=8),
    codec=st.sampled_from(sorted(COMPRESS)),
    kind=st.sampled_from(["jsonl", "json", "json array", "txt"]),
)
def test_a_compressed_file_gives_the_documents_its_uncompressed_bytes_give(
    tmp_path_factory, texts, codec, kind
):
    directory = tmp_path_factory.mktemp("compressed")
    if kind == "txt":
        texts = texts[:1]
        data = texts[0].encode()
    elif kind == "json array":
        data = json.dumps([{"text": t, "id": i} for i, t in enumerate(texts)]).encode()
    else:
        data = _jsonl({"text": t} for t in texts)
    name = kind.split()[0]
    plain, packed = directory / f"docs.{name}", directory / f"docs.{name}{SUFFIX[codec]}"
    plain.write_bytes(data)
    packed.write_bytes(COMPRESS[codec](data))
    assert _documents(packed) == _documents(plain) == texts


def test_zstd_frames_and_gzip_members_written_one_after_another_read_as_one_file(tmp_path):
    first, second = _jsonl([{"text": "one"}]), _jsonl([{"text": "two"}, {"text": "three"}])
    (tmp_path / "a.jsonl.zst").write_bytes(_zstd(first) + _zstd(second))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(first) + gzip.compress(second))
    assert (
        _documents(tmp_path / "a.jsonl.zst") == _documents(tmp_path / "a.jsonl.gz") == ["one", "two", "three"]
    )


@pytest.mark.parametrize("codec", sorted(COMPRESS))
def test_a_damaged_or_cut_short_compressed_file_is_an_error_naming_it(tmp_path, codec):
    data = COMPRESS[codec](_jsonl({"text": f"document {i}"} for i in range(200)))
    label = {"gzip": "gzip", "zstd": "Zstandard", "bz2": "bzip2", "xz": "xz"}[codec]
    for name, damaged in (("short", data[: len(data) // 2]), ("garbage", b"this is not compressed at all")):
        path = tmp_path / f"{name}.jsonl{SUFFIX[codec]}"
        path.write_bytes(damaged)
        with pytest.raises(
            InputError, match=rf"{name}\.jsonl\{SUFFIX[codec]}: not a {label} file, or a damaged one"
        ):
            _documents(path)


def test_bad_bytes_in_a_compressed_file_are_placed_in_its_uncompressed_text(tmp_path):
    path = tmp_path / "d.jsonl.zst"
    path.write_bytes(_zstd(b'{"text": "fine"}\n{"text": "bad \xff"}\n'))
    with pytest.raises(
        InvalidUtf8Error, match=r"d\.jsonl\.zst, line 2: not UTF-8 text at byte 31 of the uncompressed"
    ):
        _documents(path)


def test_a_json_text_source_holds_lines_or_one_array_and_a_bad_record_is_named_by_its_item(tmp_path):
    (tmp_path / "lines.json").write_text('{"text": "a"}\n{"text": "b"}\n')
    (tmp_path / "array.json").write_text('[{"text": "a"}, {"text": "b"}]')
    (tmp_path / "bad.json").write_text('[{"text": "a"}, {"body": "b"}, {"text": "c"}]')
    assert _documents(tmp_path / "lines.json") == _documents(tmp_path / "array.json") == ["a", "b"]
    with pytest.raises(InputError, match=r"bad\.json, item 2: no 'text' field \(pass --text-field FIELD"):
        _documents(tmp_path / "bad.json")
    assert _documents(tmp_path / "bad.json", ReadPolicy(skip_bad_lines=True)) == ["a", "c"]


def test_a_parquet_file_compressed_whole_is_read(tmp_path):
    table = pa.table({"text": ["one", "two"]})
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "t.parquet.zst").write_bytes(_zstd((tmp_path / "t.parquet").read_bytes()))
    assert _documents(tmp_path / "t.parquet.zst") == ["one", "two"]


def test_a_chat_data_set_of_compressed_shards_trains_on_its_train_split(tmp_path, tokenizer_path):
    conversation = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]}
    dataset = tmp_path / "dataset"
    (dataset / "data").mkdir(parents=True)
    for split, count in (("train", 6), ("test", 2)):
        data = _jsonl([conversation] * count)
        (dataset / "data" / f"{split}-00000-of-00001.jsonl.zst").write_bytes(_zstd(data))
    (dataset / "plain.jsonl").write_bytes(_jsonl([conversation] * 6))
    files = sorted(str(p) for p in dataset.rglob("*") if p.is_file() and p.name != "plain.jsonl")
    chosen = training_files(str(dataset), files)
    assert [f.rpartition("/")[2] for f in chosen.files] == ["train-00000-of-00001.jsonl.zst"]
    assert chosen.other_splits == {"test": 1}
    piece = describe_source(chosen.files[0]).pieces()[0]
    assert len(list(read_conversations(piece, ReadPolicy(), ReadNotes()))) == 6
    (dataset / "plain.jsonl").rename(tmp_path / "plain.jsonl")
    options = {"format": "chat", "progress": False}
    build_store(dataset, tokenizer_path, tmp_path / "zst", **options)
    build_store([str(tmp_path / "plain.jsonl")], tokenizer_path, tmp_path / "plain", **options)
    zst, plain = TokenStore.open(tmp_path / "zst"), TokenStore.open(tmp_path / "plain")
    assert zst.num_docs == 6 and zst.content_hash == plain.content_hash


@pytest.fixture
def web_folder(tmp_path):
    """``tmp_path`` served over HTTP on loopback (a query string is ignored, as a presigned URL's is)."""
    server = serve_on_loopback(functools.partial(_QuietHandler, directory=str(tmp_path)), "web-folder")
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_a_presigned_urls_file_is_known_by_its_name_and_its_signature_is_in_no_record(
    tmp_path, web_folder, tokenizer_path
):
    pytest.importorskip("aiohttp", reason="aiohttp is not installed: fsspec reads http(s) URLs with it")
    signed = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2Fus-east-1&X-Amz-Signature=5ec2e7"
    texts = [f"def f{i}(x):\n    return x * {i}\n" for i in range(12)]
    (tmp_path / "docs.jsonl.gz").write_bytes(gzip.compress(_jsonl({"text": t} for t in texts)))
    shutil.copy(tokenizer_path, tmp_path / "tokenizer.json")
    out = tmp_path / "store"
    build_store([f"{web_folder}/docs.jsonl.gz{signed}"], f"{web_folder}/tokenizer.json{signed}", out,
                progress=False)  # fmt: skip
    assert TokenStore.open(out).num_docs == len(texts)  # read as gzipped JSON Lines, not as one text document
    manifest = (out / "manifest.json").read_text()
    assert "5ec2e7" not in manifest and "AKIA" not in manifest
    record = json.loads(manifest)
    assert record["sources"][0]["url"] == f"{web_folder}/docs.jsonl.gz?***"
    assert record["tokenizer"]["name"] == "tokenizer.json"


def test_a_web_tokenizer_without_fsspecs_http_support_is_one_line_naming_it(monkeypatch):
    import fsspec

    def no_http(url, mode="rb"):
        raise ImportError('HTTPFileSystem requires "requests" and "aiohttp" to be installed')

    monkeypatch.setattr(fsspec, "open", no_http)
    url = "https://host/tokenizer.json?X-Amz-Signature=5ec2e7"
    with pytest.raises(TokenizerFileError) as refused:
        build_store(["unread.jsonl"], url, "memory://never-built", progress=False)
    assert str(refused.value) == (
        "tokenizer 'https://host/tokenizer.json?***': cannot be read "
        '(HTTPFileSystem requires "requests" and "aiohttp" to be installed)'
    )
