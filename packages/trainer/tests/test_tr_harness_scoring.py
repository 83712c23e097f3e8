"""The harness's scorer: the trainer's own held-out losses on the same tokens, whatever the request order,
batch size, padding or mesh; a few compiled shapes per task; its bad inputs; and the shipped task data
rebuilt byte for byte."""

import gc
import json
import sys

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from meltemi.datastore.storage import Directory
from meltemi.trainer import adapters
from meltemi.trainer.config_io import load_config
from meltemi.trainer.harness import build_tasks, scoring
from meltemi.trainer.harness.errors import EvalError
from meltemi.trainer.harness.scoring import TokenScorer
from meltemi.trainer.model.llama import Llama
from meltemi.trainer.step.eval_step import make_eval_step
from meltemi.trainer.step.mesh import inference_layout

VOCAB, MAX_LEN = 128, 64
CONFIG = load_config(None, [
    "--model.vocab_size", str(VOCAB), "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
    "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
    "--model.max_seq_len", str(MAX_LEN), "--model.attention", "xla", "--model.cross_entropy", "xla",
    "--model.cross_entropy_block_size", "128", "--model.init_std", "0.3",
    "--data.seq_len", "32", "--trainer.compute_dtype", "float32",
])  # fmt: skip
_rng = np.random.default_rng(0)
# Contexts and continuations of every size class: one-token, within each length bucket, and past MAX_LEN
# (truncated from the left).
REQUESTS = [
    (_rng.integers(0, VOCAB, c).tolist(), _rng.integers(0, VOCAB, n).tolist())
    for c, n in [(1, 1), (3, 2), (10, 5), (14, 1), (20, 9), (30, 3), (40, 20), (58, 5), (70, 4), (1, 30)]
]
EVAL_STEP = jax.jit(make_eval_step(CONFIG))  # one jit for all requests: a repeated length reuses its program


# The model and its reference scores are fixtures, not module constants: every xdist worker imports this
# module to collect it, and building them at import cost each worker about 3 CPU-seconds. The tests share a
# worker, so that they are built once.
pytestmark = pytest.mark.xdist_group("harness-scoring")


@pytest.fixture(scope="module")
def model() -> Llama:
    """Spread logits (init_std 0.3), so a wrong position or a missing token changes a score by far more
    than 1e-4."""
    return Llama.init(CONFIG.model, key=jax.random.key(7))


@pytest.fixture(scope="module")
def reference(model) -> list:
    """Each request scored alone."""
    return [TokenScorer(model, batch_size=1).score([r])[0] for r in REQUESTS]


@jax.jit  # for speed (the scorer computes its logits jitted): eagerly each op compiled on its own
def full_logits(model, ids):
    return model.logits(ids, hax.zeros_like(ids))


def trainer_loss(model, context, continuation) -> float:
    """The trainer's held-out loss (``evaluate.make_eval_step``) summed over the continuation's tokens."""
    whole = [*context, *continuation][-(MAX_LEN + 1) :]
    n = len(whole) - 1
    mask = np.zeros((1, n), bool)
    mask[0, n - min(len(continuation), n) :] = True
    batch = adapters.named_batch({
        "input_ids": np.asarray([whole[:-1]]), "targets": np.asarray([whole[1:]]),
        "segment_ids": np.zeros((1, n), np.int32), "loss_mask": mask, "source": np.zeros(1, np.int32),
    })  # fmt: skip
    sums = EVAL_STEP(model, batch, np.zeros(VOCAB, np.int32))
    return float(sums.loss)


def test_log_likelihoods_are_the_trainers_own_losses(model, reference):
    for (context, continuation), score in zip(REQUESTS, reference, strict=True):
        assert score.logprob == pytest.approx(-trainer_loss(model, context, continuation), abs=1e-4)
    assert np.ptp([s.logprob / len(r[1]) for s, r in zip(reference, REQUESTS, strict=True)]) > 0.5


def test_greedy_is_true_exactly_for_the_models_own_argmax_continuation(model):
    context = REQUESTS[4][0]
    ids = hax.named(jax.numpy.asarray([context]), ("batch", "position"))
    best = int(np.argmax(np.asarray(full_logits(model, ids).array)[0, -1]))
    other = (best + 1) % VOCAB
    scores = TokenScorer(model).score([(context, [best]), (context, [other])])
    assert [s.greedy for s in scores] == [True, False]
    assert scores[0].logprob > scores[1].logprob


@settings(max_examples=20)
@given(order=st.permutations(range(len(REQUESTS))), batch_size=st.sampled_from([1, 2, 3, 5, 8]))
def test_order_batch_size_and_padding_change_no_score(model, reference, order, batch_size):
    scores = TokenScorer(model, batch_size=batch_size).score([REQUESTS[i] for i in order])
    for i, score in zip(order, scores, strict=True):
        assert score.logprob == pytest.approx(reference[i].logprob, abs=1e-4)
        assert score.greedy == reference[i].greedy


def test_rows_and_parameters_split_over_eight_devices_give_the_same_scores(model, reference):
    plan = inference_layout(CONFIG, jax.devices()[:8]).plan
    assert plan.shape["data"] == 8
    sharded = jax.device_put(model, plan.parameter_shardings(model))
    q_proj = sharded.layers.stacked.self_attn.q_proj.weight.array
    assert {shard.data.size for shard in q_proj.addressable_shards} == {q_proj.size // 8}
    scorer = TokenScorer(sharded, batch_size=5, plan=plan)
    assert scorer.rows == 8  # rounded up to a multiple of the devices
    for score, alone in zip(scorer.score(REQUESTS), reference, strict=True):
        assert score.logprob == pytest.approx(alone.logprob, abs=1e-4)


def test_a_task_compiles_one_program_per_length_bucket(model):
    """60 requests of 1 to 64 tokens, 2 of them scored: the five length buckets, 8 scored positions."""
    requests = [(list(range(1, 1 + c % 70)) or [1], [5, 6]) for c in range(60)]
    before = dict(scoring.TRACES)
    TokenScorer(model, batch_size=6).score(requests)
    new = {shape for shape, count in scoring.TRACES.items() if count > before.get(shape, 0)}
    assert new <= {(6, length, 8) for length in (16, 24, 32, 48, 64)}
    assert sum(scoring.TRACES[s] - before.get(s, 0) for s in new) <= 5


@pytest.mark.parametrize(
    ("kwargs", "requests", "message"),
    [
        ({"batch_size": 0}, [], "batch_size must be a positive integer, got 0"),
        ({"max_length": 65}, [], "max_length 65 must be between 1 and model.max_seq_len (64)"),
        ({}, [([1, 2], [])], "a request's continuation is empty: there is nothing to score"),
        ({}, [([], [3])], "a request needs at least two tokens in context and continuation together"),
    ],
)
def test_bad_requests_and_settings_are_one_line_errors(model, kwargs, requests, message):
    with pytest.raises(EvalError) as error:
        TokenScorer(model, **kwargs).score(requests)
    assert str(error.value) == message


def test_the_shipped_task_data_rebuilds_byte_for_byte_wherever_it_is_written(capsys):
    manifest = json.loads((build_tasks.TASKS_DIR / "manifest.json").read_text())
    if manifest["python"] != sys.version.split()[0]:
        pytest.skip(f"the shipped data comes from Python {manifest['python']}'s standard library")
    out = Directory("memory://rebuilt-tasks")  # a URL goes through the storage layer, as a folder does
    assert build_tasks.main(["--out", "memory://rebuilt-tasks"]) == 0
    assert gc.isenabled()  # the build parses with the cyclic collector off, and turns it back on
    said = capsys.readouterr().out.splitlines()
    assert out.list() == sorted([*manifest["files"], "manifest.json"])
    for name, written in manifest["files"].items():
        assert out.read_bytes(name) == (build_tasks.TASKS_DIR / name).read_bytes(), name
        assert f"memory://rebuilt-tasks/{name}: {written['documents']} documents" in said
        assert written["documents"] >= 40
    first = json.loads(out.read_text("stdlib_next_line.jsonl").splitlines()[0])
    assert len(first["choices"]) == 4 and first["context"].endswith("\n")
    assert first["source"].startswith(("test/", "unittest/test/", "idlelib/idle_test/", "ctypes/test/"))


def test_a_results_file_is_new_and_one_that_appears_meanwhile_is_kept(tmp_path):
    from meltemi.trainer.harness.errors import ResultsFileError
    from meltemi.trainer.harness.results_file import results_file

    target = results_file(str(tmp_path / "evals" / "results.json"))  # a new folder is made by the write
    (tmp_path / "evals").mkdir(exist_ok=True)
    (tmp_path / "evals" / "results.json").write_text("another evaluation's")
    with pytest.raises(ResultsFileError, match="appeared while evaluating; the results there are kept"):
        target.write("{}")
    assert (tmp_path / "evals" / "results.json").read_text() == "another evaluation's"
    for out in (str(tmp_path), "memory://", "memory://doc-results/"):
        with pytest.raises(ResultsFileError) as refused:
            results_file(out)
        suggested = f"{out.rstrip('/')}/results.json"
        assert str(refused.value) == f"--out {out}: names a folder; name a file, e.g. {suggested}"
    fresh = results_file("memory://doc-results/a.json")
    fresh.write('{"ok": 1}')
    assert str(fresh) == "memory://doc-results/a.json"
