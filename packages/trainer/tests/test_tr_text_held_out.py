"""A text data set's test split is what its source is evaluated on (``data.held_out: split``), as a chat data
set's is: the whole train split trained, the whole test split held out; ``tail`` keeps the store's tail."""

import json

import jax
import numpy as np
import pytest

from meltemi.datastore import SequenceDataset, TokenStore, build_store, corpora
from meltemi.trainer.config_io import validate
from meltemi.trainer.data.sources import resolve_data
from meltemi.trainer.errors import ConfigError, DataError
from meltemi.trainer.trainer import Trainer


def trainer_of(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)


def with_eval_store(store, eval_store) -> str:
    return f"{{py: {{store: {store}, eval_store: {eval_store}}}}}"


@pytest.fixture
def text_data_set(tmp_path):
    """A data set laid out as the Hub lays one out: a card naming its splits, ``data/{train,test}-*.jsonl``,
    each line a document (standard-library modules: the train split 60 of them, the test split 8 others)."""
    files = corpora.python_stdlib()
    root = tmp_path / "wiki"
    (root / "data").mkdir(parents=True)
    splits = "".join(f"  - split: {split}\n    path: data/{split}-*\n" for split in ("train", "test"))
    (root / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n  data_files:\n{splits}---\n")
    for split, chosen in (("train", files[:60]), ("test", files[100:108])):
        lines = [json.dumps({"text": open(f, encoding="utf-8").read()}) + "\n" for f in chosen]
        (root / "data" / f"{split}-00000-of-00001.jsonl").write_text("".join(lines))
    return root


def test_a_text_data_sets_test_split_is_evaluated_whole_and_its_train_split_trained_whole(
    make_config, text_data_set, tmp_path
):
    cache = ["--data.cache_dir", str(tmp_path / "cache")]
    source = ["--data.sources", f"{{wiki: {{corpus: {text_data_set}}}}}"]
    trainer = trainer_of(make_config(*cache, *source), tmp_path / "run")
    resolved = trainer.config.data.sources["wiki"]
    assert resolved.eval_store is not None and "/wiki-test-" in resolved.eval_store
    train, held = TokenStore.open(resolved.store), TokenStore.open(resolved.eval_store)
    assert (train.num_docs, held.num_docs) == (60, 8)
    loader = trainer.data.held_out["wiki"]
    assert loader.dataset.num_sequences == SequenceDataset(held, 32).num_sequences  # all of it, not a tail
    expected = SequenceDataset(held, 32).read(np.arange(16)).tokens[:, :-1]
    assert np.array_equal(loader.batch(0)["input_ids"], expected)  # the test split's tokens, from its start
    assert (
        trainer.data.packing["wiki"] == f"held out: {loader.dataset.num_sequences:,} sequences ({held.path})"
    )
    (trained,) = trainer.data.train.dataset.sources
    assert trained.num_sequences == SequenceDataset(train, 32).num_sequences  # nothing of it held out

    tail = trainer_of(make_config(*cache, *source, "--data.held_out", "tail"), tmp_path / "tail")
    assert tail.config.data.sources["wiki"].eval_store is None
    assert tail.data.held_out["wiki"].dataset.store.path == train.path  # the tail of the train split
    assert "wiki" not in tail.data.packing


def test_a_data_corpus_that_is_a_data_set_is_evaluated_on_its_test_split_too(
    make_config, text_data_set, tmp_path
):
    said = []
    config = make_config("--data.corpus", str(text_data_set), "--data.cache_dir", str(tmp_path / "cache"))
    (source,) = resolve_data(config, say=said.append).data.sources.values()
    assert (TokenStore.open(source.store).num_docs, TokenStore.open(source.eval_store).num_docs) == (60, 8)
    assert "(its test split, held out)" in said[2]


def test_a_bad_text_eval_store_is_named_with_its_remedy(make_config, corpus, text_data_set, tmp_path):
    store = corpus["store"]
    one_line = tmp_path / "one.py"
    one_line.write_text("x = 1\n")
    small = tmp_path / "small"
    build_store([str(one_line)], corpus["tokenizer"], small, progress=False)
    with pytest.raises(
        DataError,
        match=r"^data.sources.py.eval_store: .*small holds \d+ tokens, fewer than one sequence of "
        r"data.seq_len \+ 1 = 33; lower data.seq_len or hold out the store's tail instead "
        r"\(--data.held_out tail\)$",
    ):
        trainer_of(make_config("--data.sources", with_eval_store(store, small)), tmp_path / "a")
    other = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tmp_path / "other.json")
    foreign = tmp_path / "foreign"
    build_store([str(text_data_set / "data")], other, foreign, progress=False)
    with pytest.raises(DataError, match=r"^data.sources.py.eval_store: .*foreign was built with tokenizer"):
        trainer_of(make_config("--data.sources", with_eval_store(store, foreign)), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_recorded_with_data_chat_held_out_reads_back_as_data_held_out():
    """Checkpoints written before data.held_out applied to text sources say data.chat.held_out."""
    recorded = validate({"data": {"chat": {"held_out": "tail", "loss_on": "all"}}}, "m.json", recorded=True)
    assert recorded.data.held_out == "tail" and recorded.data.chat.loss_on == "all"
    assert validate({"data": {"chat": {"loss_on": "all"}}}).data.held_out == "split"
    with pytest.raises(ConfigError, match=r"data.held_out: Input should be 'split', 'tail' or 'none'"):
        validate({"data": {"chat": {"held_out": "head"}}})


def test_the_old_flag_is_refused_with_its_new_name(make_config):
    with pytest.raises(ConfigError) as refused:
        make_config("--data.chat.held_out", "tail")
    assert (
        str(refused.value)
        == "--data.chat.held_out: now --data.held_out (it chooses what text sources hold out too)"
    )
