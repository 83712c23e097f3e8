"""Evaluating checkpoints through lm-evaluation-harness: ``apps/evaluate.py`` on a small run's step-0 and
trained checkpoints (accuracy rises), the ``meltemi`` model's log-likelihoods against the trainer's own
losses, transformers' on the exported checkpoint and the harness's own ``hf`` model, and bad input.

Needs the ``eval`` dependency group (lm-eval); the ``hf`` comparisons also the ``torch`` group (torch and
accelerate): CI installs them; see pyproject.toml.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed: see the `eval` group in pyproject.toml")

from lm_eval.api.instance import Instance

from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.checkpointer import Checkpointer
from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.config_io import dump_config, load_config
from meltemi.trainer.harness.model import MeltemiLM
from meltemi.trainer.harness.runner import SHIPPED_DIR, run_tasks
from meltemi.trainer.hf import export_hf
from meltemi.trainer.step.eval_step import make_eval_step
from meltemi.trainer.step.fake_devices import fake_devices_environ
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
STEPS = 400  # about 10 s here: enough for both multiple-choice tasks to rise well clear of chance
CHOICE_TASKS = ("stdlib_next_line", "stdlib_return")
# Spread over the workers (not kept on one, as a module's tests are by default): the run is built once per
# session (`shared`, the other workers wait for it). CI runs these after installing the eval group; on one
# worker they set that pass's length (182.7 s against 153.6 s spread, benchmarks/RESULTS.md). The longest
# starts first.
pytestmark = pytest.mark.spread


def small_run_config(small_corpus, steps: int, *overrides: str):
    return load_config(None, [
        "--model.vocab_size", "384", "--model.hidden_dim", "64", "--model.intermediate_dim", "128",
        "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
        "--model.max_seq_len", "128", "--model.attention", "xla", "--model.cross_entropy", "xla",
        "--model.cross_entropy_block_size", "128", "--model.remat", "none",
        "--data.tokenizer", small_corpus["tokenizer"], "--data.sources", f"{{py: {{store: {small_corpus['store']}}}}}",  # noqa: E501
        "--data.seq_len", "64", "--data.eval_fraction", "0.05", "--data.mixture_block_size", "16",
        "--trainer.num_train_steps", str(steps), "--trainer.global_batch_size", "16",
        "--trainer.eval_every", "0", "--trainer.compute_dtype", "float32", "--trainer.mesh.data", "1",
        "--trainer.checkpoint_every", str(steps),
        "--optimizer.learning_rate", "1e-2", "--optimizer.warmup_steps", "1", *overrides,
    ])  # fmt: skip


@pytest.fixture(scope="module")
def run(shared, small_corpus) -> dict[str, Path]:
    """A small model's step-0 checkpoint (``zero``), the run trained for ``STEPS`` (``trained``) and its
    Hugging Face export (``hf``), built once per session."""

    def build(root: Path) -> None:
        config = small_run_config(small_corpus, STEPS)
        initial = TrainProgram(config, MeshPlan.of(config, jax.devices()[:1])).initial_state()
        Checkpointer(root / "zero", config.trainer, config.model_dump(mode="json")).save(initial, wait=True)
        (root / "config.yaml").write_text(dump_config(config))
        train_optimized(root / "config.yaml", root / "trained")
        model = load_model(root / "trained").model
        export_hf(model, root / "hf", tokenizer=config.data.tokenizer)

    root = shared.get(f"evaluate-run-{STEPS}", build)
    return {"zero": root / "zero", "trained": root / "trained", "hf": root / "hf"}


def optimized_environ(devices: int) -> dict[str, str]:
    """The environment of a process on ``devices`` fake devices at XLA's default optimization level, not
    the suite's 0: these tests' long child processes (the 400 training steps, the scoring runs) execute
    more than they compile. The 400 steps took 43 CPU-seconds unoptimized and 18 optimized, a scoring run
    of the app 10.6 and 8.7 (their programs are loaded from the compilation cache after the first run)."""
    env = fake_devices_environ(devices)
    level = "--xla_backend_optimization_level="
    env["XLA_FLAGS"] = " ".join(flag for flag in env["XLA_FLAGS"].split() if not flag.startswith(level))
    return env


def train_optimized(config: Path, run_dir: Path) -> None:
    """``python -m meltemi.trainer`` on one device, optimized (``optimized_environ``)."""
    command = [sys.executable, "-m", "meltemi.trainer", "--config", str(config), "--run-dir", str(run_dir)]
    done = subprocess.run(command, env=optimized_environ(1), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def evaluate_app(*args: str, cwd: Path, devices: int = 1, **environ: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "apps" / "evaluate.py"), *args]
    env = optimized_environ(devices) | environ
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def held_out_text() -> str:
    return json.loads((SHIPPED_DIR / "stdlib_files.jsonl").read_text().splitlines()[0])["text"]


def choice_requests(count: int) -> list[Instance]:
    """``count`` documents of each multiple-choice task as (context, choice) requests, every choice."""
    requests = []
    for task in CHOICE_TASKS:
        for line in (SHIPPED_DIR / f"{task}.jsonl").read_text().splitlines()[:count]:
            doc = json.loads(line)
            for choice in doc["choices"]:
                requests.append(Instance("loglikelihood", doc, (doc["context"], choice), len(requests)))
    return requests


@pytest.fixture(scope="module")
def meltemi_lm(run) -> MeltemiLM:
    return MeltemiLM(str(run["trained"]), batch_size=8)


@pytest.mark.slow  # two scoring runs of the app: handed out first
def test_accuracy_rises_from_the_step_0_checkpoint_to_the_trained_one(run, tmp_path):
    tasks = ",".join([*CHOICE_TASKS, "stdlib_files"])
    scores = {}
    for name in ("zero", "trained"):
        out = tmp_path / f"{name}.json"
        result = evaluate_app("--checkpoint", str(run[name]), "--tasks", tasks, "--limit", "100",
                              "--batch-size", "16", "--out", str(out), cwd=tmp_path, devices=2)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "--metadata" not in result.stderr  # the harness's advice for its own command line
        assert re.search(r"^\|stdlib_next_line *\|", result.stdout, flags=re.MULTILINE), result.stdout
        assert "|    Metric     |" in result.stdout and "acc_norm" in result.stdout  # the harness's table
        scores[name] = json.loads(out.read_text())["results"]
    for task in CHOICE_TASKS:
        before, after = scores["zero"][task]["acc,none"], scores["trained"][task]["acc,none"]
        assert after >= before + 0.05, (task, before, after)
    bpb = [scores[name]["stdlib_files"]["bits_per_byte,none"] for name in ("zero", "trained")]
    assert bpb[1] < bpb[0] - 1.0


def test_loglikelihoods_are_the_trainers_own_losses_on_real_text(run, meltemi_lm):
    trained = load_model(run["trained"])
    config, model = trained.config, trained.model
    text = held_out_text()[:180]
    tokens = meltemi_lm.tok_encode(text)
    assert 60 < len(tokens) < meltemi_lm.max_length  # one window

    def trainer_loss(ids: list[int], scored: int) -> float:
        """The trainer's held-out loss (``make_eval_step``) of ``ids``' last ``scored`` tokens."""
        n = len(ids) - 1
        mask = np.zeros((1, n), bool)
        mask[0, n - scored :] = True
        batch = adapters.named_batch({
            "input_ids": np.asarray([ids[:-1]]), "targets": np.asarray([ids[1:]]),
            "segment_ids": np.zeros((1, n), np.int32), "loss_mask": mask, "source": np.zeros(1, np.int32),
        })  # fmt: skip
        return float(jax.jit(make_eval_step(config))(model, batch, np.zeros(384, np.int32)).loss)

    (rolling,) = meltemi_lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    # A whole text is scored after the end-of-text token, as the trainer sees a document start.
    assert rolling == pytest.approx(-trainer_loss([meltemi_lm.eot_token_id, *tokens], len(tokens)), abs=1e-3)
    cut = next(  # a context that ends in a character whose tokens begin the text's
        k
        for k in range(len(text) // 2, len(text))
        if text[k - 1].isalnum()
        and tokens[: len(meltemi_lm.tok_encode(text[:k]))] == meltemi_lm.tok_encode(text[:k])
    )
    context, continuation = text[:cut], text[cut:]
    scored = len(tokens) - len(meltemi_lm.tok_encode(context))
    [(logprob, _)] = meltemi_lm.loglikelihood([Instance("loglikelihood", {}, (context, continuation), 0)])
    assert logprob == pytest.approx(-trainer_loss(tokens, scored), abs=1e-3)
    assert -rolling / len(tokens) < 4.5  # a trained model (at init: log 384 = 5.95 nats a token)


def test_transformers_scores_the_export_the_same(run, meltemi_lm):
    torch = pytest.importorskip("torch", reason="torch is not installed: see pyproject.toml's torch group")
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    hf = transformers.LlamaForCausalLM.from_pretrained(run["hf"], dtype=torch.float32).eval()
    requests = choice_requests(5)
    ours = meltemi_lm.loglikelihood(requests, disable_tqdm=True)
    for request, (logprob, greedy) in zip(requests, ours, strict=True):
        context_ids, continuation_ids = meltemi_lm._encode_pair(*request.args)  # the harness's own split
        window = [*context_ids, *continuation_ids][-(meltemi_lm.max_length + 1) :]
        with torch.no_grad():
            logits = hf(torch.tensor([window[:-1]])).logits[0].double().log_softmax(-1).numpy()
        scored = range(len(window) - 1 - len(continuation_ids), len(window) - 1)
        theirs = sum(logits[i, window[i + 1]] for i in scored)
        assert logprob == pytest.approx(theirs, abs=1e-4)
        assert greedy == all(logits[i].argmax() == window[i + 1] for i in scored)


def test_the_harness_hf_model_scores_the_export_as_meltemi_does(run, meltemi_lm):
    pytest.importorskip("torch", reason="torch is not installed: see pyproject.toml's torch group")
    pytest.importorskip("accelerate", reason="accelerate is not installed: see pyproject.toml's torch group")
    from lm_eval.models.huggingface import HFLM

    hf_lm = HFLM(pretrained=str(run["hf"]), device="cpu", batch_size=8, dtype="float32")
    requests = choice_requests(5)
    for (ours, our_greedy), (theirs, their_greedy) in zip(
        meltemi_lm.loglikelihood(requests, disable_tqdm=True),
        hf_lm.loglikelihood(requests, disable_tqdm=True),
        strict=True,
    ):
        assert ours == pytest.approx(theirs, abs=1e-4) and our_greedy == their_greedy
    texts = [Instance("loglikelihood_rolling", {}, (held_out_text(),), 0)]
    assert meltemi_lm.loglikelihood_rolling(texts) == pytest.approx(
        hf_lm.loglikelihood_rolling(texts, disable_tqdm=True), rel=1e-5
    )
    tasks = [*CHOICE_TASKS, "stdlib_files", "stdlib_return_gen"]
    ours = run_tasks(meltemi_lm, tasks, limit=12, bootstrap_iters=0, quiet=True).metrics
    theirs = run_tasks(hf_lm, tasks, limit=12, bootstrap_iters=0, quiet=True).metrics
    assert ours.keys() == theirs.keys() and len(ours) == 8
    assert ours == pytest.approx(theirs, rel=1e-5)


@pytest.fixture(scope="module")
def no_tokenizer_checkpoint(run, tmp_path_factory) -> Path:
    """The step-0 checkpoint with its config's ``data.tokenizer`` removed."""
    copy = tmp_path_factory.mktemp("no-tokenizer") / "step-0"
    shutil.copytree(run["zero"] / "checkpoints" / "step-0", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["config"]["data"]["tokenizer"] = None
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def closed_port() -> int:
    """A loopback port nothing listens on (connecting is refused at once)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _missing_data_task(tmp_path: Path) -> str:
    (tmp_path / "mine.yaml").write_text(
        "task: mine\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'missing.jsonl'}\ntest_split: test\noutput_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{text}}"\n'
    )
    return str(tmp_path / "mine.yaml")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown", "error: unknown task 'no_such_task': not a task, group or tag the harness knows, nor a task YAML file"),  # noqa: E501
        ("hub data", "error: task 'arc_easy': its data is not on this machine: Couldn't reach 'allenai/ai2_arc' on the Hub (OfflineModeIsEnabled); offline: the Hub ({hub}) cannot be reached: [Errno 111] Connection refused; only cached data is read"),  # noqa: E501
        ("local data", "error: task '{yaml}': its data is not on this machine: Unable to find '{missing}'"),
        ("no tokenizer", "error: {checkpoint}: its config names no data.tokenizer to turn text into tokens"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_writes_nothing(run, no_tokenizer_checkpoint, tmp_path, case, message):
    yaml, checkpoint, task = _missing_data_task(tmp_path), str(run["trained"]), "stdlib_return"
    task = {"unknown": "no_such_task", "hub data": "arc_easy", "local data": yaml}.get(case, task)
    if case == "no tokenizer":
        checkpoint = str(no_tokenizer_checkpoint)
    out = tmp_path / "results.json"
    hub = f"http://127.0.0.1:{closed_port()}"  # a Hub that cannot be reached, and no offline switch set
    unreachable = {"HF_ENDPOINT": hub, "HF_HUB_OFFLINE": "", "HF_DATASETS_OFFLINE": ""}
    unreachable["NO_PROXY"] = "127.0.0.1"  # straight to it, whatever proxy this machine names
    args = ("--checkpoint", checkpoint, "--tasks", task, "--out", str(out))
    result = evaluate_app(*args, cwd=tmp_path, **(unreachable if case == "hub data" else {}))
    assert result.returncode == 1
    expected = message.format(yaml=yaml, missing=tmp_path / "missing.jsonl", checkpoint=checkpoint, hub=hub)
    assert result.stderr.strip().splitlines()[-1] == expected, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_results_go_to_a_bucket_and_a_missing_one_is_named_before_any_work(run, request, server, tmp_path):
    from meltemi.datastore.storage import Directory

    fake = request.getfixturevalue(server)
    scheme, bucket = fake.scheme, fake.bucket_url()
    args = ("--checkpoint", str(run["trained"]), "--tasks", "stdlib_return", "--limit", "8")
    result = evaluate_app(*args, "--out", f"{bucket}/evals/results.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = json.loads(Directory(f"{bucket}/evals").read_text("results.json"))
    assert 0 <= written["results"]["stdlib_return"]["acc,none"] <= 1
    missing = evaluate_app(*args, "--out", f"{scheme}://absent-bucket/results.json", cwd=tmp_path)
    assert missing.returncode == 1
    last = missing.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "absent-bucket" in last, missing.stderr
    assert "|" not in missing.stdout  # refused before any task ran: no table
    no_name = evaluate_app(*args, "--out", str(tmp_path) + "/", cwd=tmp_path)
    assert (
        no_name.stderr.strip().splitlines()[-1]
        == f"error: --out {tmp_path}/: names a folder; name a file, e.g. {tmp_path}/results.json"
    )


def test_without_tasks_the_shipped_ones_run(run, tmp_path):
    """The no-flag path: `uv run apps/evaluate.py` after `uv run apps/pretrain.py` (before, --tasks was
    required, and argparse's usage was all a newcomer saw)."""
    result = evaluate_app("--checkpoint", str(run["trained"]), "--limit", "2", "--bootstrap-iters", "0",
                          cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    ran = set(re.findall(r"^\|(\w+) *\|", result.stdout, flags=re.MULTILINE)) - {"Tasks"}
    assert ran == {"stdlib_files", "stdlib_next_line", "stdlib_return", "stdlib_return_gen"}, result.stdout


def test_an_existing_results_file_is_kept_and_bad_counts_are_refused_before_any_work(run, tmp_path):
    args = ("--checkpoint", str(run["trained"]), "--tasks", "stdlib_return", "--limit", "4")
    (tmp_path / "earlier.json").write_text('{"mine": 1}')
    (tmp_path / "evals").mkdir()
    for out, says in [("earlier.json", "already exists; name a new file (the results there are kept)"),
                      ("evals", "names a folder; name a file, e.g. evals/results.json")]:  # fmt: skip
        result = evaluate_app(*args, "--out", out, cwd=tmp_path)
        assert result.returncode == 1 and "|" not in result.stdout  # no task ran
        assert result.stderr.strip().splitlines()[-1] == f"error: --out {out}: {says}", result.stderr
    assert (tmp_path / "earlier.json").read_text() == '{"mine": 1}'
    assert not any((tmp_path / "evals").iterdir())
    for flag, value, says in [("--batch-size", "0", "must be positive, got 0"),
                              ("--max-length", "x", "must be a whole number, got 'x'"),
                              ("--bootstrap-iters", "-1", "must be at least 0, got -1"),
                              ("--limit", "all", "must be a number, got 'all'")]:  # fmt: skip
        result = evaluate_app(*args, flag, value, cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1].endswith(f"error: argument {flag}: {says}")


def test_eval_tasks_run_in_the_training_loop_beside_the_held_out_loss(small_corpus, tmp_path):
    config = small_run_config(
        small_corpus, 4, "--trainer.eval_every", "2", "--trainer.log_every", "1",
        "--eval.tasks", "[stdlib_next_line, stdlib_files]", "--eval.limit", "8",
    )  # fmt: skip
    summary = Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False).run()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluated = {r["step"]: r for r in records if "eval/stdlib_next_line/acc" in r}
    assert sorted(evaluated) == [0, 2, 4]
    for record in evaluated.values():
        assert "eval/loss" in record and 0 <= record["eval/stdlib_next_line/acc"] <= 1
        assert record["eval/stdlib_files/bits_per_byte"] > 0
    assert (tmp_path / "run" / "downstream.png").read_bytes()[:4] == b"\x89PNG"
    bpb = "eval/stdlib_files/bits_per_byte"
    assert summary.last_eval[bpb] == evaluated[4][bpb] < evaluated[0][bpb]  # the summary has them too


NO_TORCH = """
import sys
from lm_eval.api.model import LM
from meltemi.trainer.harness.runner import run_tasks

class Constant(LM):
    def loglikelihood(self, requests):
        return [(-float(len(r.args[1])), False) for r in requests]
    def loglikelihood_rolling(self, requests):
        return [-1.0 for _ in requests]
    def generate_until(self, requests):
        return ["" for _ in requests]

results = run_tasks(Constant(), ["stdlib_next_line", "stdlib_files"], limit=4, bootstrap_iters=0).results
config = results["config"]
print(sorted(results["results"]), config["limit"], config["model"], "torch" in sys.modules)
"""


def test_evaluating_records_the_settings_and_leaves_torch_unimported():
    """A JAX process that evaluates (the app, the training loop) does not import torch to describe the
    machine, as the harness's ``simple_evaluate`` does."""
    done = subprocess.run([sys.executable, "-c", NO_TORCH], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['stdlib_files',", "'stdlib_next_line']", "4", "Constant", "False"]


def test_a_name_no_task_file_mentions_is_refused_before_the_harness_indexes_its_tasks(monkeypatch):
    from meltemi.trainer.harness import runner
    from meltemi.trainer.harness.errors import UnknownTaskError

    built = []
    fail = pytest.fail
    monkeypatch.setattr(runner, "TaskManager", lambda **kwargs: built.append(kwargs) or fail("indexed"))
    with pytest.raises(UnknownTaskError, match="^unknown task 'arc_eassy': not a task, group or tag"):
        runner.PreparedTasks.of(["stdlib_return", "arc_easy", "arc_eassy"])
    assert built == []
    with pytest.raises(pytest.fail.Exception, match="indexed"):  # a name the files hold goes to the index
        runner.PreparedTasks.of(["arc_easy"])
    assert built == [{"include_path": str(SHIPPED_DIR), "include_defaults": True}]


def test_every_name_the_harness_indexes_is_mentioned_in_its_files(tmp_path):
    """Tasks, groups and tags, a task whose name comes from a template it includes among them (a template
    named as the harness names them, not ending in ``.yaml``, so that it is not indexed itself)."""
    from lm_eval.tasks import TaskManager

    from meltemi.trainer.harness.runner import unmentioned

    family = tmp_path / "family"
    family.mkdir()
    (family / "_default_template_yaml").write_text("task: from_template\noutput_type: loglikelihood\n")
    (family / "child.yaml").write_text("include: _default_template_yaml\ntag: [tag_one, tag_two]\n")
    (tmp_path / "own.yaml").write_text("task: 'quoted_name'\ntag: tag_two\noutput_type: loglikelihood\n")
    (tmp_path / "group.yaml").write_text("group: the_group\ntask: [quoted_name]\n")
    names = TaskManager(include_path=str(tmp_path), include_defaults=False).all_tasks
    assert {"from_template", "quoted_name", "tag_one", "tag_two", "the_group"} <= set(names)
    assert unmentioned(names, tmp_path) == []
    assert unmentioned(["the_grop", "tag_one", "from_templat"], tmp_path) == ["the_grop"]


def test_an_unknown_eval_task_stops_the_run_before_it_starts(small_corpus, tmp_path):
    from meltemi.trainer.harness.errors import UnknownTaskError

    config = small_run_config(small_corpus, 2, "--eval.tasks", "[stdlib_nxt]")
    with pytest.raises(UnknownTaskError, match="unknown task 'stdlib_nxt'"):
        Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert not (tmp_path / "run").exists()
