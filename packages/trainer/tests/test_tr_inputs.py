"""Bad inputs a user can give: each a one-line error naming the field, raised before any compile, and
nothing already written is lost."""

import re

import jax
import pytest

from meltemi.datastore import build_store, corpora
from meltemi.trainer.errors import ConfigError, DataError, TrainerError
from meltemi.trainer.trainer import Trainer


def make_trainer(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)


def test_a_store_with_another_vocabulary_is_named(make_config, run_dir):
    with pytest.raises(
        DataError, match=r"^data.sources.py.store: .* vocabulary of 384, but model.vocab_size is 500$"
    ):
        make_trainer(make_config("--model.vocab_size", "500"), run_dir)


def test_a_store_built_with_another_tokenizer_is_named(make_config, run_dir, tmp_path, corpus):
    files = corpora.python_stdlib()[:3]
    other = corpora.train_tokenizer(files, 300, tmp_path / "other.json")
    with pytest.raises(DataError, match=r"^data.sources.py.store: .*was built with tokenizer"):
        make_trainer(make_config("--data.tokenizer", other), run_dir)


def test_a_sequence_length_the_store_cannot_fill_is_named(make_config, run_dir, tmp_path, corpus):
    small = tmp_path / "small.py"
    small.write_text("x = 1\n")
    build_store([str(small)], corpus["tokenizer"], tmp_path / "small", progress=False)
    config = make_config(
        "--data.sources", "{tiny: {store: %s}}" % (tmp_path / "small"), "--model.max_seq_len", "4096"
    )
    with pytest.raises(DataError, match=r"^data.seq_len 32: .* holds \d+ tokens, too few"):
        make_trainer(config, run_dir)


def test_a_missing_store_and_no_store_at_all_are_named(make_config, run_dir, tmp_path):
    nope = tmp_path / "nope"
    with pytest.raises(DataError) as caught:
        make_trainer(make_config("--data.sources", f"{{py: {{store: {nope}}}}}"), run_dir)
    build = f"uv run python -m meltemi.datastore build --input FILES --tokenizer TOKENIZER_JSON --out {nope}"
    assert str(caught.value) == (
        f"data.sources.py.store: {nope}: no such token store (the directory does not exist): build one from "
        f"your files ({build}), or name files or a data set to build one from on first use (--data.corpus "
        "PATH)"
    )
    with pytest.raises(DataError, match=r"^data.sources is empty"):
        make_trainer(make_config("--data.sources", "{}"), run_dir)


def test_mixture_stages_must_start_on_a_block(make_config, run_dir):
    stages = "[{start_step: 0, weights: {py: 1}}, {start_step: 3, weights: {py: 2}}]"
    with pytest.raises(
        DataError, match=r"data.stages\[1\].start_step 3 begins at sequence 48, not a multiple of"
    ):
        make_trainer(make_config("--data.stages", stages, "--data.mixture_block_size", "32"), run_dir)


def test_an_unknown_kernel_is_named_by_the_config(make_config):
    with pytest.raises(ConfigError, match=r"^model.cross_entropy: Input should be"):
        make_config("--model.cross_entropy", "triton")


def test_an_unwritable_run_directory_is_named_and_nothing_is_lost(make_config, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("keep me")
    with pytest.raises(TrainerError, match=r"run directory .*file/run: cannot write there"):
        make_trainer(make_config(), blocker / "run").run()
    assert blocker.read_text() == "keep me"


def test_a_step_larger_than_the_machines_memory_is_refused_before_its_state_and_nothing_is_lost(
    make_config, run_dir, monkeypatch
):
    """On a CPU such a run was made (its state allocated, its directory written) and then killed by the
    system at its first step, with no word of why."""
    from meltemi.trainer.errors import HostMemoryError
    from meltemi.trainer.step.host_memory import HostMemory

    make_trainer(make_config(), run_dir).run()
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    monkeypatch.setattr(HostMemory, "now", staticmethod(lambda: HostMemory(1 << 20, "available")))
    made = []
    monkeypatch.setattr("meltemi.trainer.trainer.starting_state", lambda *a, **k: made.append(1))
    with pytest.raises(HostMemoryError) as caught:
        make_trainer(
            make_config("--trainer.num_train_steps", "12", "--optimizer.extension", "tail"), run_dir
        ).run()
    assert re.fullmatch(
        r"the train step needs [\d.]+ GiB of memory and this machine has 0\.0 GiB available: it would be "
        r"killed at its first step\. To fit, lower trainer\.global_batch_size or data\.seq_len, set "
        r"trainer\.microbatch_size \(each step in several passes\), set model\.remat full, or train a "
        r"smaller model \(--config configs/tiny\.yaml\); --dry-run plans a config without training it",
        str(caught.value),
    ), caught.value
    assert not made  # no state was made
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_second_run_in_a_directory_a_run_is_training_in_is_refused_naming_it(make_config, run_dir):
    """Two runs writing one directory at once would interleave their records and checkpoints."""
    import os

    from meltemi.trainer.run_directory import RunDirectory

    make_trainer(make_config(), run_dir).run()  # a run, done: its lock is let go
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}
    held = RunDirectory.of(run_dir).hold()  # another run, training there now
    try:
        more = make_config("--trainer.num_train_steps", "8", "--optimizer.extension", "tail")
        with pytest.raises(TrainerError) as caught:
            make_trainer(more, run_dir).run()
        assert re.fullmatch(
            rf"run directory {run_dir}: another run is training in it \(process {os.getpid()} on \S+, since "
            r"[\d-]+ [\d:]+\); wait for it to end, stop it \(Ctrl-C saves a checkpoint\), or train in "
            r"another directory \(--run-dir DIR\)",
            str(caught.value),
        ), caught.value
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"} == before
    finally:
        held.release()
    assert make_trainer(more, run_dir).run().steps == 8  # the directory is free again


def test_parts_of_the_standard_library_are_sources_of_their_own(make_config, corpus, tmp_path):
    """``stdlib:PATTERN,...`` (the rehearsal's web, code and math) builds a store of just those files; a
    pattern matching none is one line naming the field and the root the patterns are read under."""
    import json

    from meltemi.datastore import TokenStore
    from meltemi.trainer.data.sources import resolve_data

    sources = {"math": {"corpus": "stdlib:statistics.py,fractions.py"}}
    config = make_config("--data.sources", json.dumps(sources), "--data.cache_dir", str(tmp_path / "cache"))
    store = TokenStore.open(resolve_data(config, say=lambda line: None).data.sources["math"].store)
    assert store.num_docs == 2
    missing = make_config("--data.sources", json.dumps({"web": {"corpus": "stdlib:no_such_dir/*"}}),
                          "--data.cache_dir", str(tmp_path / "cache"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.sources.web.corpus: stdlib:no_such_dir/\* matches none of"):
        resolve_data(missing, say=lambda line: None)


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--data.corpus", "{missing}"], "data.corpus"),
        (["--data.sources", "{{web: {{corpus: {missing}}}}}"], "data.sources.web.corpus"),
        (["--data.corpus", "stdlib", "--data.eval_sets", "{{held: {{corpus: {missing}}}}}"],
         "data.eval_sets.held.corpus"),
    ],
)  # fmt: skip
def test_a_missing_corpus_is_named_before_the_default_tokenizer_is_trained(flags, field, tmp_path):
    """The standard library's tokenizer (the default one) takes seconds to train on first use: a corpus that
    is not there is refused first, and nothing is written to the cache."""
    from meltemi.trainer.config_io import load_config
    from meltemi.trainer.data.sources import resolve_data

    missing, cache = tmp_path / "nowhere.txt", tmp_path / "cache"
    config = load_config(None, [*(f.format(missing=missing) for f in flags), "--data.cache_dir", str(cache)])
    said = []
    with pytest.raises(ConfigError, match=rf"^{re.escape(field)}: {re.escape(str(missing))}: no such file"):
        resolve_data(config, say=said.append)
    assert said == [] and not cache.exists()
