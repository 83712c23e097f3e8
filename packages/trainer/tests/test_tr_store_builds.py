"""Sources that name the raw inputs of their stores (``data.sources.NAME.build_from``): what the config
accepts, the store-building command's flags, a launch on slices that builds the missing stores before any
cluster starts, and a run that finds its store missing saying how to build it."""

import os

import pytest

from meltemi.datastore import corpora
from meltemi.trainer.command import parse_command
from meltemi.trainer.config_io import load_config
from meltemi.trainer.errors import ConfigError, DataError, TrainerError


@pytest.fixture(scope="module")
def modules() -> list[str]:
    """Four small standard-library modules with some text in each."""
    files = sorted(corpora.python_stdlib(), key=lambda path: (os.path.getsize(path), path))
    return [path for path in files if os.path.getsize(path) > 2000][:4]


def sources(**each: dict) -> list[str]:
    import json

    return ["--data.sources", json.dumps(each)]


def test_a_source_names_its_stores_inputs_as_one_or_several_with_a_text_field_and_subset():
    config = load_config(None, sources(
        web={"store": "gs://b/stores/web", "build_from": "gs://b/raw/web/", "text_field": "content"},
        chat={"store": "c", "build_from": ["a.jsonl", "b/*.jsonl"], "format": "chat", "subset": "all"},
    ))  # fmt: skip
    web, chat = config.data.sources["web"], config.data.sources["chat"]
    assert web.build_from == ["gs://b/raw/web/"] and web.text_field == "content"
    assert chat.build_from == ["a.jsonl", "b/*.jsonl"] and chat.subset == "all"


@pytest.mark.parametrize(
    "source, message",
    [
        ({"build_from": "raw/"}, r"build_from names the raw inputs of a store: give the store's path or URL"),
        (
            {"corpus": "c.jsonl", "build_from": "raw/"},
            r"build_from names the raw inputs of a store, and a corpus is built",
        ),
        (
            {"store": "s", "corpus": "c", "build_from": "raw/"},
            r"build_from names the raw inputs of a store, and a corpus",
        ),
        ({"store": "s", "build_from": []}, r"build_from \[\]: name each input"),
        ({"store": "s", "build_from": ["raw/", " "]}, r"build_from \['raw/', ' '\]: name each input"),
        ({"store": "s", "text_field": "content"}, r"text_field names where a corpus's text is: give it with"),
        ({"store": "s", "subset": "all"}, r"subset names the part of a corpus's data set to read: give it"),
        (
            {"corpus": "c.jsonl", "format": "chat", "text_field": "dialog"},
            r"text_field names where a text corpus's text is, .* with data.chat.messages_field$",
        ),
    ],
)
def test_a_nonsense_combination_is_one_line_naming_the_source(source, message):
    with pytest.raises(ConfigError, match=f"^data.sources.web: {message}") as caught:
        load_config(None, sources(web=source))
    assert "\n" not in str(caught.value)


def test_the_store_building_command_has_its_own_flags_in_the_same_parser():
    command = parse_command(
        ["--config", "r.yaml", "--ray", "HEAD:6379", "--data.seq_len", "8"], store_builds=True
    )
    assert (command.config, command.ray, command.overrides) == (
        "r.yaml",
        "HEAD:6379",
        ("--data.seq_len", "8"),
    )
    for flag in ("--launch", "--devices", "--verify"):
        with pytest.raises(ConfigError, match=f"^{flag}: a flag of the training commands, not of this one"):
            parse_command([flag, "x"], store_builds=True)
    with pytest.raises(ConfigError, match=r"^--ray: a flag of apps/build_stores.py; a run on a Ray cluster"):
        parse_command(["--ray", "auto"])
    with pytest.raises(ConfigError, match=r"^--rey: neither a flag of this command nor a config field \(did"):
        parse_command(["--rey", "auto"], store_builds=True)


def launch_args(corpus, tmp_path, build_from: list[str]) -> list[str]:
    return ["--launch", "ray", "--trainer.global_batch_size", "16", "--model.vocab_size", "384",
            "--data.tokenizer", corpus["tokenizer"], "--run-dir", str(tmp_path / "run"),
            *sources(web={"store": str(tmp_path / "stores" / "web"), "build_from": build_from})]  # fmt: skip


def test_a_launch_builds_the_missing_stores_before_the_cluster_starts(
    corpus, modules, monkeypatch, tmp_path, capsys
):
    import meltemi.raytpu
    from meltemi.trainer.cli import main

    def cluster_starts(*args, **kwargs):
        assert (tmp_path / "stores" / "web" / "manifest.json").is_file(), "the cluster started first"
        raise TrainerError("the cluster starts here")

    monkeypatch.setattr(meltemi.raytpu, "LocalSliceCluster", cluster_starts)
    monkeypatch.chdir(tmp_path)
    status = main(launch_args(corpus, tmp_path, modules))
    said = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and said[-1] == "error: the cluster starts here"
    assert any(line.startswith(f"data.sources.web: {tmp_path}/stores/web: built 4 docs") for line in said), (
        said
    )


def test_a_launch_whose_store_cannot_be_built_is_one_line_and_starts_no_cluster(
    corpus, monkeypatch, tmp_path, capsys
):
    import meltemi.raytpu
    from meltemi.trainer.cli import main

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(meltemi.raytpu, "LocalSliceCluster", no_cluster)
    monkeypatch.chdir(tmp_path)
    missing = str(tmp_path / "raw")
    status = main(launch_args(corpus, tmp_path, [missing]))
    said = capsys.readouterr().err.strip().splitlines()
    assert (
        status == 1 and said[-1] == f"error: data.sources.web: input '{missing}': no such file or directory"
    )


def test_a_run_whose_store_is_missing_says_how_to_build_it_from_its_inputs(corpus, tmp_path):
    from meltemi.trainer.data.run_data import open_data

    store = tmp_path / "stores" / "web"
    config = load_config(None, ["--model.vocab_size", "384", "--data.tokenizer", corpus["tokenizer"],
                                *sources(web={"store": str(store), "build_from": "raw/"})])  # fmt: skip
    with pytest.raises(DataError) as caught:
        open_data(config)
    assert str(caught.value) == (
        f"data.sources.web.store: {store}: no such token store (the directory does not exist): build it from "
        "its build_from with uv run apps/build_stores.py and the run's --config and overrides (or train with "
        "--launch ray, which builds it first)"
    )


@pytest.mark.xdist_group("raytpu-cluster")  # one Ray cluster at a time on this machine
def test_the_sources_stores_are_built_side_by_side_on_a_ray_cluster(corpus, modules, tmp_path):
    """``--ray``'s path: the builds' units run as tasks of the cluster this process is connected to (here a
    local one of two CPUs, started in the test)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (the datastore's [ray] extra)")
    from meltemi.raytpu.local_cluster import loopback_only
    from meltemi.trainer.data.store_builds import build_missing_stores

    two = sources(web={"store": str(tmp_path / "web"), "build_from": modules[:2]},
                  code={"store": str(tmp_path / "code"), "build_from": modules[2:]})  # fmt: skip
    config = load_config(None, ["--model.vocab_size", "384", "--data.tokenizer", corpus["tokenizer"], *two])
    with loopback_only():  # on loopback, the workers in this environment as it is (not uv's copy of it)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcomes = build_missing_stores(config, cluster="auto", say=lambda line: None, done=lambda o: None)
    finally:
        ray.shutdown()
    assert [(o.source, o.failed) for o in outcomes] == [("web", False), ("code", False)], outcomes
    assert outcomes[0].line.startswith(f"data.sources.web: {tmp_path}/web: built 2 docs"), outcomes
    assert (tmp_path / "web" / "manifest.json").is_file() and (tmp_path / "code" / "manifest.json").is_file()


def test_stores_built_side_by_side_show_a_bar_each_on_a_terminal_and_nothing_elsewhere(
    make_config, modules, tmp_path, monkeypatch
):
    """Each build gives its progress to the display (the datastore draws one build's own bar only): two
    stores built at once end with a line each, naming its field, its stage and its counts."""
    import io
    import re

    from rich.console import Console

    from meltemi.trainer.data import build_progress
    from meltemi.trainer.data.store_builds import build_missing_stores

    consoles: list[Console] = []

    def console(terminal: bool):
        def make(**options) -> Console:
            consoles.append(Console(file=io.StringIO(), force_terminal=terminal, width=160))
            return consoles[-1]

        return make

    for terminal in (True, False):
        monkeypatch.setattr(build_progress, "Console", console(terminal))
        each = {name: {"store": str(tmp_path / str(terminal) / name), "build_from": modules}
                for name in ("one", "two")}  # fmt: skip
        outcomes = build_missing_stores(make_config(*sources(**each)), say=lambda line: None, done=print)
        assert not any(outcome.failed for outcome in outcomes)
    drawn, silent = (console.file.getvalue() for console in consoles)
    assert silent == ""
    lines = [line for line in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn).splitlines() if line.strip()]
    last = {line.split()[0]: line for line in lines}
    for name in ("one", "two"):
        assert re.search(
            r"assembling, done .* (\d+)/\1  4 docs  5.31k tokens", last[f"data.sources.{name}"]
        ), drawn
