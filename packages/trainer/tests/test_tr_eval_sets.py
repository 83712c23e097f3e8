"""Evaluation as Marin ran it: eval sets never trained on (``data.eval_sets``, tagged, with per-set, per-tag,
micro and macro loss and bits per byte), every held-out row (``trainer.eval_batches: all``), tasks at their
own shot counts and cadence (``eval.tasks``, ``eval.every``), and Hugging Face exports every N steps
(``trainer.export_every``)."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meltemi.datastore import SequenceDataset, TokenStore, corpora
from meltemi.trainer.config import EvalTask
from meltemi.trainer.data.sources import resolve_data
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.trainer import Trainer


def trainer_of(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)


def records_of(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def other_modules(tmp_path):
    """A JSON Lines corpus of stdlib modules the tests' training store does not hold (it holds the 120
    smallest): documents no training batch may contain."""
    files = sorted(corpora.python_stdlib(), key=lambda p: (os.path.getsize(p), p))[300:306]
    out = tmp_path / "other.jsonl"
    out.write_text("".join(json.dumps({"text": open(f, encoding="utf-8").read()}) + "\n" for f in files))
    return out


def test_an_eval_set_is_evaluated_beside_the_sources_and_never_trained_on(
    make_config, other_modules, tmp_path
):
    eval_sets = {"other": {"corpus": str(other_modules), "tags": ["unseen"]}}
    config = make_config(
        "--data.eval_sets", json.dumps(eval_sets), "--data.cache_dir", str(tmp_path / "cache"),
        "--trainer.num_train_steps", "2", "--trainer.checkpoint_every", "2",
    )  # fmt: skip
    trainer = trainer_of(config, tmp_path / "run")
    resolved = trainer.config.data.eval_sets["other"]
    assert resolved.store.startswith(str(tmp_path / "cache")) and resolved.tags == ["unseen"]
    assert list(trainer.data.held_out) == ["py", "other"] and trainer.data.source_names == ["py"]
    assert trainer.data.eval_set_tags == {"other": ("unseen",)}

    # no training batch holds a row of the eval set (which has more rows than the steps read)
    held = SequenceDataset(TokenStore.open(resolved.store), config.data.seq_len)
    unseen = {row.tobytes() for row in held.read(np.arange(held.num_sequences)).tokens}
    trained = [trainer.data.train.batch(step) for step in range(40)]
    rows = np.concatenate([np.concatenate([b["input_ids"], b["targets"][:, -1:]], axis=1) for b in trained])
    assert not {row.astype(held.read(np.arange(1)).tokens.dtype).tobytes() for row in rows} & unseen
    assert {int(s) for b in trained for s in b["source"]} == {0}  # the mixture has one source: py

    summary = trainer.run()
    evaluated = [r for r in records_of(tmp_path / "run") if "eval/loss" in r]
    assert [r["step"] for r in evaluated] == [0, 2]
    last = evaluated[-1]
    assert summary.last_eval == {k: v for k, v in last.items() if k != "step"}
    # the averages, from the per-set values and the targets each set's batches count
    table = np.asarray(trainer.data.token_bytes)
    counts, spelled = {}, {}
    for name, loader in trainer.data.held_out.items():
        batches = [loader.batch(step) for step in range(trainer.data.eval_steps[name])]
        counts[name] = sum(int(b["loss_mask"].sum()) for b in batches)
        spelled[name] = sum(int(table[b["targets"]][b["loss_mask"]].sum()) for b in batches)
    losses = {name: last[f"eval/{name}/loss"] for name in counts}
    for name in counts:  # bits per byte: the set's loss in bits over the bytes its targets spell
        assert last[f"eval/{name}/bpb"] == pytest.approx(
            losses[name] * counts[name] / math.log(2) / spelled[name]
        )
    total = sum(counts.values())
    assert last["eval/loss"] == pytest.approx(sum(losses[n] * counts[n] for n in counts) / total, rel=1e-6)
    assert last["eval/macro_loss"] == pytest.approx((losses["py"] + losses["other"]) / 2, rel=1e-6)
    bits = sum(losses[n] * counts[n] for n in counts) / math.log(2)
    assert last["eval/bpb"] == pytest.approx(bits / sum(spelled.values()), rel=1e-6)
    assert last["eval/macro_bpb"] == pytest.approx((last["eval/py/bpb"] + last["eval/other/bpb"]) / 2)
    assert last["eval/unseen/micro_loss"] == last["eval/unseen/macro_loss"] == pytest.approx(losses["other"])
    assert last["eval/unseen/bpb"] == pytest.approx(last["eval/other/bpb"])
    assert losses["other"] != pytest.approx(losses["py"], rel=1e-3)  # two sets, two losses
    assert "eval/py/micro_loss" not in last  # a source has no tags


def test_eval_batches_all_reads_every_sequence_of_the_held_out_split_once(make_config, tmp_path):
    config = make_config("--trainer.eval_batches", "all", "--data.eval_fraction", "0.03")
    trainer = trainer_of(config, tmp_path / "run")
    loader = trainer.data.held_out["py"]
    split = loader.dataset.dataset  # the held-out tail, under the rows that fill out its last batch
    count, batch = split.num_sequences, config.trainer.global_batch_size
    assert count % batch, "the split must end in a partial batch for this test"
    assert trainer.data.eval_steps["py"] == math.ceil(count / batch)
    read = [loader.batch(step) for step in range(trainer.data.eval_steps["py"])]
    inputs = np.concatenate([b["input_ids"] for b in read])
    mask = np.concatenate([b["loss_mask"] for b in read])
    expected = split.read(np.arange(count)).tokens[:, :-1]
    assert np.array_equal(inputs[:count], expected) and not mask[count:].any()

    state = trainer.initial_state()
    metrics = trainer.evaluation(state)
    # the same sums over the whole split as one batch of all its rows
    whole = {name: np.concatenate([b[name] for b in read])[:count] for name in read[0]}
    table = np.asarray(trainer.data.token_bytes)
    lengths = jnp.asarray(np.pad(table, (0, config.model.vocab_size - len(table))))
    with jax.set_mesh(trainer.plan.mesh):
        sums = trainer.evaluation.step_program()(
            state.model, trainer.program.device_batch(whole, count), lengths
        )
    assert float(sums.tokens) == mask.sum() > (trainer.data.eval_steps["py"] - 1) * batch * 0.9
    assert metrics["eval/py/loss"] == pytest.approx(float(sums.loss) / float(sums.tokens), rel=1e-5)

    numbered = trainer_of(make_config("--data.eval_fraction", "0.03", "--trainer.eval_batches", "1000"),
                          tmp_path / "numbered")  # fmt: skip
    assert numbered.data.eval_steps["py"] == count // batch  # whole batches only


def test_an_eval_set_named_as_a_source_or_tagged_so_is_refused(make_config, corpus):
    with pytest.raises(ConfigError, match="data.eval_sets.py: a source of data.sources is named py too"):
        make_config("--data.eval_sets", json.dumps({"py": {"store": corpus["store"]}}))
    tagged = {"more": {"store": corpus["store"], "tags": ["py"]}}
    with pytest.raises(ConfigError, match="data.eval_sets.more.tags: py names a source"):
        make_config("--data.eval_sets", json.dumps(tagged))
    # a source named by data.stores: its name is the store's directory's, known once the data is resolved
    stores = make_config(
        "--data.stores", corpus["store"], "--data.eval_sets", json.dumps({"store": {"store": "x"}})
    )
    with pytest.raises(ConfigError, match="data.eval_sets.store: a source of data.sources is named store"):
        resolve_data(stores)


def test_tasks_have_their_own_cadence(make_config, tmp_path):
    """``eval.every`` steps between task evaluations, ``trainer.eval_every`` between held-out ones, both at
    the first and last step, in one record where they meet (a stand-in for the harness, which these
    tests need not have)."""

    class Tasks:
        def run(self, model):
            return {"eval/stand_in/acc": 0.5}

    config = make_config("--trainer.num_train_steps", "6", "--trainer.eval_every", "2", "--eval.every", "3")
    trainer = trainer_of(config, tmp_path / "run")
    trainer.evaluation.tasks = Tasks()
    assert [s for s in range(1, 7) if trainer.evaluation.due(s)] == [2, 3, 4, 6]
    summary = trainer.run()
    records = records_of(tmp_path / "run")
    assert [r["step"] for r in records if "eval/loss" in r] == [0, 2, 4, 6]
    assert [r["step"] for r in records if "eval/stand_in/acc" in r] == [0, 3, 6]
    assert summary.last_eval["eval/stand_in/acc"] == 0.5 and "eval/loss" in summary.last_eval


def test_num_fewshot_and_an_alias_reach_the_harness(make_config):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed: see the `eval` group in pyproject.toml")
    from lm_eval.api.model import LM

    from meltemi.trainer.harness.in_loop import downstream_eval

    tasks = ["stdlib_return", {"name": "stdlib_return", "num_fewshot": 2, "alias": "return_2shot"},
             "stdlib_next_line:1"]  # fmt: skip
    config = make_config("--eval.tasks", json.dumps(tasks))
    assert config.eval.task_list()[2] == EvalTask(name="stdlib_next_line", num_fewshot=1)
    prepared = downstream_eval(config, plan=None).tasks  # what the training loop runs
    shots = {task.task_name: task.get_config("num_fewshot") for task in prepared.tasks}
    assert shots == {"stdlib_return": None, "return_2shot": 2, "stdlib_next_line": 1}

    class Contexts(LM):
        """Scores nothing; keeps each request's context by task and document."""

        def __init__(self):
            super().__init__()
            self.seen = {}

        def loglikelihood(self, requests):
            for r in requests:
                self.seen[(r.task_name, r.doc_id)] = r.args[0]
            return [(-1.0, False) for _ in requests]

        def loglikelihood_rolling(self, requests):
            return [-1.0 for _ in requests]

        def generate_until(self, requests):
            return ["" for _ in requests]

    lm = Contexts()
    results = prepared.run(lm, limit=3, bootstrap_iters=0).results
    assert {"stdlib_return", "return_2shot", "stdlib_next_line"} <= set(results["results"])
    for doc in range(3):
        plain, shown = lm.seen[("stdlib_return", doc)], lm.seen[("return_2shot", doc)]
        assert shown.endswith(plain) and len(shown) > len(plain)  # two examples before the question

    from meltemi.trainer.harness.errors import EvalError
    from meltemi.trainer.harness.runner import PreparedTasks

    tagged = PreparedTasks.of(["meltemi_stdlib:1"]).tasks  # a tag's count is every one of its tasks'
    assert len(tagged) == 4 and {task.get_config("num_fewshot") for task in tagged} == {1}
    with pytest.raises(EvalError, match="a group or tag of 4 tasks has no alias"):
        PreparedTasks.of([EvalTask(name="meltemi_stdlib", alias="mine")])


def test_export_every_writes_hugging_face_directories_that_load_back_equal(make_config, tmp_path):
    from meltemi.trainer.checkpoint.trained_model import load_model
    from meltemi.trainer.hf.load import import_hf

    config = make_config("--trainer.num_train_steps", "3", "--trainer.export_every", "2",
                         "--trainer.checkpoint_every", "3")  # fmt: skip
    trainer = trainer_of(config, tmp_path / "run")
    trainer.run()
    exports = tmp_path / "run" / "hf"
    assert sorted(p.name for p in exports.iterdir()) == ["step-2", "step-3"]  # every 2 steps, and the last
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in (exports / "step-3").iterdir()
    }
    _, exported = import_hf(exports / "step-3", config.model)
    trained = load_model(tmp_path / "run").model
    leaves = zip(jax.tree_util.tree_leaves(exported), jax.tree_util.tree_leaves(trained), strict=True)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in leaves)
    _, earlier = import_hf(exports / "step-2", config.model)
    assert not np.array_equal(
        np.asarray(earlier.embed_tokens.weight.array), np.asarray(exported.embed_tokens.weight.array)
    )
    # a step exported before (a resumed run passing it again) is kept as it is
    state = trainer.initial_state()
    assert trainer.exports.export(state, 3).endswith("was exported before; kept")
    _, again = import_hf(exports / "step-3", config.model)
    assert np.array_equal(
        np.asarray(again.embed_tokens.weight.array), np.asarray(exported.embed_tokens.weight.array)
    )


def test_an_eval_sets_store_is_built_from_its_raw_inputs_as_a_sources_is(
    make_config, other_modules, tmp_path
):
    """``apps/build_stores.py`` builds the missing stores of the eval sets that name their inputs (Paloma's
    subsets in configs/marin_8b.yaml), as it builds the sources'."""
    from meltemi.trainer.data.store_builds import build_missing_stores, planned_lines

    store = tmp_path / "stores" / "other"
    eval_sets = {"other": {"store": str(store), "build_from": str(other_modules), "tags": ["unseen"]}}
    config = make_config("--data.eval_sets", json.dumps(eval_sets))
    (planned,) = planned_lines(config)
    assert planned.line == f"data.eval_sets.other: {store} is to be built from {other_modules}"
    (built,) = build_missing_stores(config, say=lambda line: None, done=lambda outcome: None)
    assert not built.failed and built.line.startswith("data.eval_sets.other: ")
    assert TokenStore.open(store).num_docs == 6


def test_held_out_none_trains_on_every_row_and_evaluates_only_the_eval_sets(make_config, corpus):
    """Marin's way (data.held_out: none): no source's tail is held out; the eval sets are what is evaluated,
    and a run that would then evaluate nothing is refused before it starts."""
    from meltemi.trainer.data.run_data import open_data

    with pytest.raises(ConfigError, match="data.held_out none holds nothing out of the sources: name what"):
        make_config("--data.held_out", "none")
    eval_sets = {"other": {"store": corpus["store"]}}
    tail = open_data(make_config("--data.eval_sets", json.dumps(eval_sets)))
    whole = open_data(make_config("--data.held_out", "none", "--data.eval_sets", json.dumps(eval_sets)))
    assert list(tail.held_out) == ["py", "other"] and list(whole.held_out) == ["other"]
    every_row = SequenceDataset(TokenStore.open(corpus["store"]), whole.train.dataset.sources[0].seq_len)
    assert whole.train.dataset.sources[0].num_sequences == every_row.num_sequences
    assert tail.train.dataset.sources[0].num_sequences < every_row.num_sequences
