"""A Hub repository named as transformers names one is read from the local Hub cache where huggingface_hub
would find it (the same directory, the same snapshot), never downloaded; a local path of that name wins, and
a name in no cache is one line saying where it was looked for."""

import json
from pathlib import Path

import pytest

from meltemi.datastore import TokenStore, build_store
from meltemi.datastore.errors import InputError
from meltemi.datastore.hub_cache import cached_snapshot, hub_cache, local_or_cached
from meltemi.datastore.testing import put_in_hub_cache

VARIABLES = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


@pytest.mark.parametrize(
    "environment, expected",
    [
        ({}, "~/.cache/huggingface/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
        ({"XDG_CACHE_HOME": "/x", "HF_HOME": "/h"}, "/h/hub"),
        ({"HF_HOME": "/h", "HUGGINGFACE_HUB_CACHE": "/legacy"}, "/legacy"),
        ({"HUGGINGFACE_HUB_CACHE": "/legacy", "HF_HUB_CACHE": "/new"}, "/new"),
    ],
)
def test_the_cache_is_where_huggingface_hub_looks(monkeypatch, environment, expected):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert hub_cache() == Path(expected).expanduser()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_name_is_its_main_snapshot_as_huggingface_hub_resolves_it(cache, tmp_path, monkeypatch):
    huggingface_hub = pytest.importorskip(
        "huggingface_hub", reason="huggingface_hub is not installed: the test compares with its lookup"
    )
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "config.json").write_text("{}")
    snapshot = put_in_hub_cache(cache, "org/tiny", "model", tmp_path / "files")
    put_in_hub_cache(cache, "org/tiny", "model", tmp_path / "files", commit="b" * 40)  # an older revision
    (cache / "models--org--tiny" / "refs" / "main").write_text("a" * 40)
    theirs = huggingface_hub.snapshot_download("org/tiny", local_files_only=True, cache_dir=str(cache))
    assert cached_snapshot("org/tiny", "model") == snapshot == Path(theirs)
    assert cached_snapshot("org/tiny", "dataset") is None and cached_snapshot("org/other", "model") is None
    assert local_or_cached("org/tiny", "model") == str(snapshot)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "tiny").mkdir(parents=True)  # a local directory of that name wins
    assert local_or_cached("org/tiny", "model") == "org/tiny"


def test_a_data_set_named_as_load_dataset_names_it_is_built_from_its_train_split(
    cache, tmp_path, tokenizer_path
):
    files = tmp_path / "dataset"
    (files / "data").mkdir(parents=True)
    (files / "README.md").write_text("# chats")
    for split, answer in (("train", "Hello"), ("test", "Bye")):
        chat = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": answer}]}
        (files / "data" / f"{split}-00000-of-00001.jsonl").write_text(json.dumps(chat) + "\n")
    put_in_hub_cache(cache, "org/chats", "dataset", files)
    report = build_store("org/chats", tokenizer_path, tmp_path / "store", format="chat", progress=False)
    assert report.documents == 1 and report.counts["other_split_files"] == 1
    assert TokenStore.open(tmp_path / "store").num_docs == 1
    with pytest.raises(
        InputError,
        match=rf"^input 'org/missing': no such file or directory, nor is a dataset of that name in the "
        rf"Hugging Face cache \({cache}; read, never downloaded\)$",
    ):
        build_store("org/missing", tokenizer_path, tmp_path / "other", format="chat", progress=False)


def test_a_chat_template_is_read_from_a_models_snapshot_by_its_name(cache, tmp_path):
    from meltemi.datastore.chat.recipe import load_template
    from meltemi.datastore.errors import ChatTemplateError

    (tmp_path / "model").mkdir()
    config = {"chat_template": "{{ bos_token }}{{ messages[0].content }}", "bos_token": "<s>"}
    (tmp_path / "model" / "tokenizer_config.json").write_text(json.dumps(config))
    put_in_hub_cache(cache, "org/chat-model", "model", tmp_path / "model")
    assert load_template("org/chat-model").render([{"role": "user", "content": "Hi"}]).text == "<s>Hi"
    with pytest.raises(ChatTemplateError, match=r"'org/gone': no such file .*, nor is a model of that name"):
        load_template("org/gone")
