"""Hugging Face export and import straight to and from a bucket (the S3 server and the GCS emulator on
loopback, every test on both): the same bytes as a local export, sharded; the same bits imported, read in
place; a target that is not empty refused before any work; an export that fails midway never looks whole."""

import json

import jax
import numpy as np
import pytest

from meltemi.datastore.errors import AccessDeniedError
from meltemi.datastore.storage import Directory
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.hf import HfFormatError, export_hf, import_hf
from meltemi.trainer.hf.safetensors_reader import SafetensorsReader
from meltemi.trainer.model.llama import Llama

SMALL = ModelConfig(
    vocab_size=384,
    hidden_dim=32,
    intermediate_dim=48,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    max_seq_len=64,
)
SHARD = 20_000  # bytes: the model's 28 tensors (about 90 kB) in several shards


@pytest.fixture(params=["s3", "gcs"])
def server(request):
    """The S3 server or the GCS emulator, with its environment set."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def url(server) -> str:
    return f"{server.bucket_url()}/exports/small"


def model(seed: int = 0) -> Llama:
    return Llama.init(SMALL, key=jax.random.key(seed))


def leaves(tree) -> list[bytes]:
    return [np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree)]


def test_an_export_into_a_bucket_is_the_local_export_byte_for_byte_and_imports_the_same_bits(
    url, corpus, tmp_path
):
    llama = model()
    local = export_hf(llama, tmp_path / "hf", tokenizer=corpus["tokenizer"], max_shard_bytes=SHARD)
    assert str(export_hf(llama, url, tokenizer=corpus["tokenizer"], max_shard_bytes=SHARD)) == url
    bucket = Directory(url)
    files = {p.name: p.read_bytes() for p in local.iterdir()}
    shards = [name for name in files if name.endswith(".safetensors")]
    assert len(shards) >= 3 and "model.safetensors.index.json" in files and "tokenizer.json" in files
    assert bucket.list() == sorted(files)
    for name, data in files.items():
        assert bucket.read_bytes(name) == data, name
    assert not (tmp_path / "hf.partial").exists()

    from_bucket, from_disk = import_hf(url), import_hf(local)
    assert from_bucket[0] == from_disk[0] == SMALL
    assert leaves(from_bucket[1]) == leaves(from_disk[1]) == leaves(llama)
    reader = SafetensorsReader(url)
    assert reader.shapes == SafetensorsReader(local).shapes
    embed = reader["model.embed_tokens.weight"]
    assert embed.tobytes() == np.asarray(llama.embed_tokens.weight.array).tobytes()
    from meltemi.trainer.checkpoint.trained_model import load_model

    trained = load_model(url)  # what the apps' --checkpoint reads: the model and its tokenizer, in place
    assert trained.hugging_face and leaves(trained.model) == leaves(llama)
    assert trained.tokenizer == f"{url}/tokenizer.json" and trained.end_of_text.id is not None


def test_a_target_that_is_not_empty_is_refused_before_any_work_and_left_as_it_was(url):
    Directory(url).write_bytes("notes.txt", b"mine")
    with pytest.raises(HfFormatError) as caught:
        export_hf(model(), url)
    assert str(caught.value) == f"{url}: already holds objects; choose another"
    assert Directory(url).list() == ["notes.txt"] and Directory(url).read_bytes("notes.txt") == b"mine"


@pytest.mark.parametrize("deletes", ["allowed", "refused"])
def test_an_export_refused_midway_never_leaves_config_json(server, monkeypatch, deletes):
    """The store refuses the third shard (permissions revoked mid-export): the export stops with the
    store's one line and config.json was never written; the objects written before are deleted again, or,
    when the store refuses deletes too, stay (whole shards, never config.json)."""
    from meltemi.datastore.testing import start_faulty_proxy

    proxy = start_faulty_proxy(server.endpoint)
    monkeypatch.setenv(server.endpoint_variable, proxy.endpoint)
    url = f"{server.bucket_url()}/exports/refused"
    try:
        proxy.refuse(server.upload_method, "model-00003-of-")
        if deletes == "refused":
            proxy.refuse("DELETE", "model-0000")  # the shards: the probe before the export is deleted
        with pytest.raises(AccessDeniedError) as caught:
            export_hf(model(), url, max_shard_bytes=SHARD)
        message = str(caught.value)
        assert message.startswith(f"{url}/model-00003-of-") and "\n" not in message
        left = Directory(url).list()
        if deletes == "allowed":
            assert left == []
        else:
            assert "config.json" not in left and "model.safetensors.index.json" not in left
            assert left[0] == "generation_config.json", left
            assert [name[: len("model-00001-of")] for name in left[1:]] == [
                "model-00001-of",
                "model-00002-of",
            ]
    finally:
        proxy.stop()


def test_a_shard_cut_short_in_a_bucket_is_named_before_any_tensor_is_read(url):
    export_hf(model(), url, max_shard_bytes=SHARD)
    bucket = Directory(url)
    index = json.loads(bucket.read_bytes("model.safetensors.index.json"))
    second = sorted(set(index["weight_map"].values()))[1]
    bucket.write_bytes(second, bucket.read_bytes(second)[:-1])
    with pytest.raises(HfFormatError) as caught:
        SafetensorsReader(url)
    assert str(caught.value).startswith(
        f"{url}/{second}: not a readable safetensors file (it ends before byte "
    )
    assert "where its last tensor ends)" in str(caught.value)
