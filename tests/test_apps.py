"""apps/: the newcomer's command end to end from an empty directory, the 8B dry run, and bad inputs.

Each app runs as a subprocess, as a user runs it, in a fresh working directory on one CPU device. The
newcomer's first command runs once per session (tests/conftest.py's ``first_run``), and the tests that read
its run share one xdist worker; the bad-input tests start from a directory holding the corpus it built, as a
user's second command does.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from meltemi.trainer.step.fake_devices import fake_devices_environ
from tests.app_runs import ROOT, SMALL, app

NEWCOMER = pytest.mark.xdist_group("apps-newcomer")  # the tests that read `trained`, on one worker


@pytest.fixture(scope="module")
def trained(first_run, tmp_path_factory):
    """The session's first run of the default command (``first_run``: 4 steps from an empty directory), then
    resumed to 6 in a copy of its directory (the corpus linked, not copied)."""
    cwd = tmp_path_factory.mktemp("newcomer")
    shutil.copytree(first_run.cwd / "runs", cwd / "runs")
    first_run.link_corpus(cwd)
    second = app(
        "pretrain.py", *SMALL, "--trainer.num_train_steps", "6", "--optimizer.extension", "decay", cwd=cwd
    )
    return cwd, first_run, second


@NEWCOMER
def test_the_default_command_builds_the_corpus_trains_and_summarizes(trained):
    _, first, _ = trained
    assert first.returncode == 0, first.stderr
    assert "building the standard-library corpus" in first.stderr
    assert re.search(r"^steps: 4   tokens: 2,048", first.stdout, flags=re.MULTILINE), first.stdout
    start, end = map(
        float, re.search(r"held-out loss: ([\d.]+) at step 0 -> ([\d.]+) at step 4", first.stdout).groups()
    )
    assert end < start
    run = first.cwd / "runs" / "tiny"
    for name in ("metrics.jsonl", "loss.png", "config.yaml"):
        assert (run / name).exists(), name
    assert f"last checkpoint: {Path('runs/tiny/checkpoints/step-4')}" in first.stdout


@NEWCOMER
def test_rerunning_the_command_resumes_without_rebuilding(trained):
    cwd, first, second = trained
    assert second.returncode == 0, second.stderr
    assert "building the standard-library corpus" not in second.stderr
    assert "resuming from runs/tiny/checkpoints/step-4" in second.stderr
    assert (
        "trainer.num_train_steps 4 -> 6: the schedule goes on by decay (a new phase over steps 4-5"
        in second.stderr
    )
    resumed = (
        "steps: 6   tokens: 3,072 in all\nresumed at step 4: this session trained 2 steps (1,024 tokens, "
    )
    assert resumed in second.stdout, second.stdout
    start = re.search(r"held-out loss: ([\d.]+) at step 0", first.stdout).group(1)
    assert re.search(rf"held-out loss: {start} at step 0 -> [\d.]+ at step 6", second.stdout), second.stdout
    checkpoints = cwd / "runs" / "tiny" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4", "step-6"]  # trainer.keep_last: 2


@NEWCOMER
def test_rerunning_a_finished_run_reports_it_and_exits_cleanly(trained):
    cwd, _, _ = trained
    again = app("pretrain.py", *SMALL, "--trainer.num_train_steps", "6", cwd=cwd)
    assert again.returncode == 0, again.stderr
    assert "already trained to step 6 (trainer.num_train_steps 6): nothing to train" in again.stderr
    assert "compiled the train step" not in again.stderr
    assert "runs/tiny is already trained to step 6" in again.stdout
    assert f"last checkpoint: {Path('runs/tiny/checkpoints/step-6')}" in again.stdout
    assert "sample (temperature 0.7, top-k 40, from 'def '):\ndef " in again.stdout


@NEWCOMER
def test_a_launch_the_runs_checkpoint_refuses_is_one_line_before_any_cluster_or_file(trained):
    """As a resume on one machine, a launch on slices with a config the run cannot continue changes nothing
    in the run directory (raytpu's event log included) and starts no cluster."""
    cwd, _, _ = trained
    run = cwd / "runs" / "tiny"
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    result = app("pretrain.py", *SMALL, "--model.hidden_dim", "64", "--launch", "ray", cwd=cwd, timeout=300)
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: model.hidden_dim: the checkpoint has 32, the config 64: "), result.stderr
    assert last.endswith("cannot continue with this config") and "Ray" not in result.stderr
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before


@NEWCOMER
def test_the_trainers_own_command_is_the_apps_with_the_same_flags_and_summary(trained):
    """``python -m meltemi.trainer`` given the app's default config is the app: one parser, one summary."""
    cwd, _, _ = trained
    env = fake_devices_environ(1)
    args = ["--config", str(ROOT / "configs" / "tiny.yaml"), *SMALL, "--trainer.num_train_steps", "6"]
    module = subprocess.run([sys.executable, "-m", "meltemi.trainer", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)  # fmt: skip
    app_again = app("pretrain.py", *args, cwd=cwd)
    assert module.returncode == app_again.returncode == 0, module.stderr
    assert module.stdout == app_again.stdout and "runs/tiny is already trained to step 6" in module.stdout
    commands = (
        [sys.executable, "-m", "meltemi.trainer"],
        [sys.executable, str(ROOT / "apps" / "pretrain.py")],
    )
    helps = [
        subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120, cwd=cwd).stdout
        for command in commands
    ]
    assert helps[0].startswith("usage: python -m meltemi.trainer ") and helps[1].startswith(
        "usage: uv run apps/"
    )
    flags = [{line.split()[0] for line in text.splitlines() if line.startswith("  --")} for text in helps]
    assert flags[0] == flags[1] and {"--data.stores", "--data.corpus", "--dry-run", "--launch"} <= flags[0]


@NEWCOMER
def test_verify_audits_the_runs_checkpoints_and_its_status_says_the_verdict(trained, tmp_path):
    cwd, _, _ = trained
    checked = app("pretrain.py", "--verify", "runs/tiny", cwd=cwd)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines() == [
        "step-6: state match, data match",
        "step-4: state match, data match",
    ]
    (tmp_path / "empty").mkdir()
    missing = app("pretrain.py", "--verify", str(tmp_path / "empty"), cwd=cwd)
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == f"error: {tmp_path / 'empty'} holds no checkpoint (looked for step-N directories)"
    )


@NEWCOMER
def test_the_summary_ends_with_a_sample_of_generated_text(trained):
    _, first, _ = trained
    assert "sample (temperature 0.7, top-k 40, from 'def '):\ndef " in first.stdout


@NEWCOMER
def test_export_and_sample_read_the_run_directory(trained):
    cwd, _, _ = trained
    exported = app("export_hf.py", cwd=cwd)  # the default --checkpoint, runs/tiny, and --out, exported/tiny
    assert exported.returncode == 0, exported.stderr
    assert "exported runs/tiny/checkpoints/step-6 to exported/tiny" in exported.stdout
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (cwd / "exported" / "tiny" / name).exists(), name
    again = app("export_hf.py", cwd=cwd)
    assert again.returncode == 1 and again.stderr == (
        "error: exported/tiny: already exists and is not an empty directory; choose another with --out\n"
    )
    first = app("sample.py", "--checkpoint", "runs/tiny/checkpoints/step-6", "--prompt", "import ",
                "--max-new-tokens", "12", "--temperature", "0", cwd=cwd)  # fmt: skip
    again = app(
        "sample.py",
        "--prompt",
        "-",
        "--max-new-tokens",
        "12",
        "--temperature",
        "0",
        cwd=cwd,
        stdin="import \n",
    )  # fmt: skip  (echo's newline dropped: the same prompt)
    assert first.returncode == 0, first.stderr
    # only the continuation (a 6-step model's may be all whitespace), the same both times
    assert first.stdout == again.stdout and len(first.stdout) > len("\n")
    assert "tokens/s" in first.stderr and "tokens/s" not in first.stdout
    recorded = app("sample.py", "--max-new-tokens", "12", "--temperature", "0", cwd=cwd)  # 'def ', recorded
    assert recorded.returncode == 0, recorded.stderr
    assert "continuing the run's trainer.sample_prompt: 'def '" in recorded.stderr
    given = app("sample.py", "--prompt", "def ", "--max-new-tokens", "12", "--temperature", "0", cwd=cwd)
    assert recorded.stdout == given.stdout
    exact = app("sample.py", "--prompt", "def ", "--no-token-healing", "--max-new-tokens", "12",
                "--temperature", "0", cwd=cwd)  # fmt: skip
    assert exact.returncode == 0 and len(exact.stdout) > len("\n"), exact.stderr
    export = app("sample.py", "--checkpoint", "exported/tiny", "--dtype", "float32", "--prompt", "import ",
                 "--max-new-tokens", "12", "--temperature", "0", cwd=cwd)  # fmt: skip
    assert export.returncode == 0 and export.stdout == first.stdout, export.stderr


@NEWCOMER
def test_your_own_corpus_is_built_into_a_store_on_first_use(trained):
    cwd, _, _ = trained
    lines = [json.dumps({"text": f"def f{i}(x):\n    return x * {i}\n"}) for i in range(400)]
    (cwd / "mine.jsonl").write_text("\n".join(lines) + "\n")
    tokenizer = next((cwd / ".cache" / "meltemi").glob("stdlib-*/tokenizer.json"))
    args = [*SMALL, "--data.corpus", "mine.jsonl", "--data.tokenizer", str(tokenizer)]
    args += ["--data.seq_len", "16", "--data.eval_fraction", "0.1", "--trainer.num_train_steps", "2"]
    args += ["--run-dir", "runs/mine"]
    result = app("pretrain.py", *args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    assert "building a token store of mine.jsonl" in result.stderr
    assert "steps: 2" in result.stdout
    assert list((cwd / ".cache" / "meltemi" / "corpora").glob("mine-*/manifest.json"))


@pytest.mark.parametrize("name", ["sample.py", "export_hf.py"])
def test_a_directory_without_checkpoints_is_a_one_line_error(tmp_path, name):
    (tmp_path / "empty").mkdir()
    extra = ["--prompt", "x"] if name == "sample.py" else ["--out", str(tmp_path / "hf")]
    result = app(name, "--checkpoint", str(tmp_path / "empty"), *extra, cwd=tmp_path)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"error: {tmp_path / 'empty'} holds no checkpoint (looked for step-N directories) and is no "
        "Hugging Face model (no config.json)"
    )
    assert not (tmp_path / "hf").exists()


def test_the_8b_dry_run_plans_a_reduced_mesh_and_reports_consistent_memory(tmp_path):
    result = app("pretrain.py", "--config", str(ROOT / "configs" / "marin_8b.yaml"), "--dry-run", "--devices", "8",  # noqa: E501
                 "--trainer.global_batch_size", "8", cwd=tmp_path, devices=8, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "parameters: 8,030,261,248" in out and "FLOPs per token: 48.25 G" in out
    per_device = float(re.search(r"parameters: 8,030,261,248 \(([\d.]+) GiB per device\)", out).group(1))
    assert per_device == pytest.approx(8_030_261_248 * 4 / 8 / 2**30, rel=1e-3)  # float32, FSDP over 8
    optimizer = float(re.search(r"optimizer state: ([\d.]+) GiB per device", out).group(1))
    assert optimizer == pytest.approx(2 * per_device, rel=1e-3)  # Adam's two moments
    assert "lm_head.weight" in out and "P('model', 'data')" in out
    assert re.search(r"against 32 GiB per TPU v4: (fits|does NOT fit)", out)


def test_a_dry_run_with_no_device_count_plans_one_device_and_says_so(tmp_path):
    """`--dry-run` of the default preset (its mesh's data axis -1, no hardware.devices) was an error asking
    for a count; so was configs/llama_1b.yaml's own `--dry-run --hardware.chip H100`."""
    result = app("pretrain.py", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        "planning for one device: no --devices, hardware.devices or mesh without -1 says more (--devices N "
        "plans for N)"
    )
    assert (
        "devices: 1 (chip not set: hardware.chip), mesh {'replica': 1, 'data': 1, 'model': 1}"
        in result.stdout
    )
    assert not list(tmp_path.iterdir())  # a plan writes nothing


def test_a_dry_run_that_does_not_fit_says_by_how_much(tmp_path):
    result = app("pretrain.py", "--config", str(ROOT / "configs" / "marin_8b.yaml"), "--dry-run", "--devices", "8",  # noqa: E501
                 "--trainer.global_batch_size", "64", cwd=tmp_path, devices=8)  # fmt: skip
    assert result.returncode == 2
    limit = r"error: the plan needs [\d.]+ GiB more per device than it has: 32 GiB per TPU v4$"
    assert re.search(limit, result.stderr, re.M)


V5E_16 = ["--config", str(ROOT / "configs" / "marin_8b.yaml"), "--dry-run", "--hardware.chip", "TPU v5e",
          "--hardware.devices", "16"]  # fmt: skip


def test_evaluating_and_sampling_the_8b_are_planned_on_a_v5e_16_without_a_checkpoint(tmp_path):
    """The issue's commands: the 8B's parameters fully sharded (1/16 each), every program under 16 GiB."""
    per_device = f"parameters: 8,030,261,248 ({8_030_261_248 * 4 / 16 / 2**30:.2f} GiB per device)"
    evaluation = app("evaluate.py", *V5E_16, cwd=tmp_path)
    assert evaluation.returncode == 0, evaluation.stderr
    assert "evaluation dry run: 16 devices (TPU v5e)" in evaluation.stdout and per_device in evaluation.stdout
    assert "scoring (8 rows" not in evaluation.stdout  # the rows are rounded up to the 16 devices
    assert re.search(
        r"scoring \(16 rows x 4096 tokens, all 4096 scored\): .* peak [\d.]+ GiB", evaluation.stdout
    )
    assert re.search(r"largest [\d.]+ GiB against 16 GiB per TPU v5e: fits$", evaluation.stdout, re.M)
    assert "\n  note: XLA's CPU compiler holds bfloat16 matmul operands" in evaluation.stdout
    sampling = app("sample.py", *V5E_16, "--max-new-tokens", "128", "--trainer.mesh.data", "-1", cwd=tmp_path)
    assert sampling.returncode == 0, sampling.stderr
    assert per_device in sampling.stdout and "prefill (16 rows x 3968 prompt tokens)" in sampling.stdout
    assert "decode (16 rows, a cache of 4096 tokens" in sampling.stdout and "fits" in sampling.stdout
    assert not list(tmp_path.iterdir())  # nothing written


def test_an_evaluation_that_does_not_fit_says_by_how_much(tmp_path):
    result = app("evaluate.py", *V5E_16, "--hardware.devices", "4", "--batch-size", "64", cwd=tmp_path)
    assert result.returncode == 2
    assert "does NOT fit" in result.stdout
    limit = r"^error: the plan needs [\d.]+ GiB more per device than it has: 16 GiB per TPU v5e$"
    assert re.match(limit, result.stderr.strip()), result.stderr


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--dry-run", "--tasks", "x"], 2, "--dry-run needs --config: the run's YAML config to plan for"),
        (["--dry-run", "--config", "c.yaml", "--checkpoint", "runs/x"], 2, "--checkpoint: not with --dry-run, which plans from --config alone"),  # noqa: E501
        (["--checkpoint", "runs/x", "--tasks", "x", "--hardware.devices", "16"], 2, "--hardware.devices: not a flag of this command (config fields are set only with --dry-run; --help lists its flags)"),  # noqa: E501
        (["--checkpoint", "runs/x", "--tasks", "x", "--devices", "16"], 2, "--devices: only with --dry-run"),
        (["--dry-run", "--config", "c.yaml", "--devices", "0"], 2, "argument --devices: must be positive, got 0"),  # noqa: E501
        (["--tasks", "x"], 2, "--checkpoint not given, and its default runs/tiny does not exist: train it with uv run apps/pretrain.py, or name a run or step-N directory with --checkpoint"),  # noqa: E501
        (["--dry-run", "--config", "missing.yaml"], 1, "error: config file 'missing.yaml' does not exist"),
        (["--dry-run", "--config", "c.yaml", "--seed", "3"], 2, "--seed: neither a flag of this command nor a config field (did you mean --trainer.seed?)"),  # noqa: E501
        (["--dry-run", "--config", "c.yaml", "--run-dir", "runs/x"], 2, "--run-dir: not a flag of this command"),  # noqa: E501
        (["--dry-run", "--config", str(ROOT / "configs" / "marin_8b.yaml"), "--hardware.chips", "x"], 1, "error: --hardware.chips: not a config field (did you mean --hardware.chip?)"),  # noqa: E501
        (["--dry-run", "--config", str(ROOT / "configs" / "marin_8b.yaml"), "--hardware.devices", "3"], 2, "error: the plan needs"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_evaluation_flags_are_one_line(tmp_path, args, status, message):
    """Usage errors exit 2 as argparse's own, bad config input 1; on 3 devices the 8B's embed axis (4096)
    cannot split, so each device would hold it whole: the plan says so, and does not fit."""
    result = app("evaluate.py", *args, cwd=tmp_path)
    assert result.returncode == status
    assert message in result.stderr.strip().splitlines()[-1], result.stderr
    if args[-2:] == ["--hardware.devices", "3"]:
        assert "kept whole: embed (4096) does not split over 3 devices" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.num_train_step", "3"], r"^error: --trainer.num_train_step: not a config field \(did you mean --trainer.num_train_steps\?\)$"),  # noqa: E501
        (["--trainer.num_train_steps", "many"], r"^error: trainer.num_train_steps: Input should be a valid integer"),  # noqa: E501
        (["--config", "missing.yaml"], r"^error: config file 'missing.yaml' does not exist$"),
        (["--data.corpus", "nothere.txt"], r"^error: data.corpus: nothere.txt: no such file or directory$"),
        (["--run-dir", "blocker/run"], r"^error: run directory blocker/run: cannot write there"),
        (["--data.stores", "no/such/store"], r"^error: data.stores: no/such/store: no such token store \(the directory does not exist\): build one from your files \(uv run python -m meltemi.datastore build --input FILES --tokenizer TOKENIZER_JSON --out no/such/store\), or name files or a data set to build one from on first use \(--data.corpus PATH\)$"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_loses_nothing(with_default_corpus, tmp_path, args, message):
    (tmp_path / "blocker").write_text("keep me")
    result = app("pretrain.py", *SMALL, *args, cwd=tmp_path)
    assert result.returncode == 1
    assert re.match(message, result.stderr.strip().splitlines()[-1]), result.stderr
    assert (tmp_path / "blocker").read_text() == "keep me"


def test_a_run_directory_in_the_way_is_refused_before_the_default_corpus_is_built(tmp_path):
    (tmp_path / "blocker").write_text("keep me")
    result = app("pretrain.py", *SMALL, "--run-dir", "blocker/run", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: run directory blocker/run: cannot write")
    assert not (tmp_path / ".cache").exists() and (tmp_path / "blocker").read_text() == "keep me"


def test_bad_launch_flags_and_a_silent_address_are_one_line_errors(tmp_path):
    for args, message in (
        (["--slice-type", "v9-999"], "error: --launch ray: "),
        (["--scale-up-every", "0"], "error: --launch ray: scale_up_interval_s must be positive, got 0.0"),
        (["--address", "127.0.0.1:9"], "error: --address 127.0.0.1:9: no Ray cluster answers there"),
    ):
        result = app("pretrain.py", "--launch", "ray", *args, "--config", str(ROOT / "configs" / "tiny.yaml"),
                     "--data.tokenizer", "t.json", cwd=tmp_path, timeout=300)  # fmt: skip
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(message), result.stderr


def test_the_8b_fine_tuning_preset_is_marin_8b_instructs_recipe_on_the_8b_model():
    """configs/marin_8b_sft.yaml: Marin-8B-Instruct's published recipe, on exactly the model
    configs/marin_8b.yaml pretrains (whose dry run the test above plans)."""
    from meltemi.trainer.config_io import load_config

    sft, base = (
        load_config(ROOT / "configs" / "marin_8b_sft.yaml"),
        load_config(ROOT / "configs" / "marin_8b.yaml"),
    )
    assert sft.model == base.model.model_copy(update={"z_loss_weight": 0.0})  # z-loss: Starling's only
    o, t = sft.optimizer, sft.trainer
    # Levanter's decay=0.0 holds the peak after a warmup of int(0.03 * 10,228) steps (exp1237, default_sft)
    assert [(s.kind, s.start, s.end) for s in o.segments] == [("linear", 0, 306), ("constant", 306, 10228)]
    assert o.weight_decay == 0
    assert (t.global_batch_size, sft.data.seq_len, t.num_train_steps) == (128, 4096, 10228)
    assert t.initialize_from.parameters_only and t.initialize_from.reset_step
    weights = {name: source.weight for name, source in sft.data.sources.items()}
    assert weights == {
        "tulu3_sft_mixture": 939343, "smoltalk": 1043917, "natural_reasoning": 1145824,
        "verifiable_math": 777457, "dolphin_r1_reasoning": 585418, "dolphin_r1_nonreasoning": 214318,
        "openthoughts_math": 89120, "acecode": 87149, "bespoke_stratos": 16710,
    }  # fmt: skip
    assert all(source.format == "chat" for source in sft.data.sources.values())
    assert (sft.data.chat.template, sft.data.chat.loss_on) == ("llama3", "assistant")
    tokens = t.global_batch_size * sft.data.seq_len * t.num_train_steps
    assert tokens == pytest.approx(5e9, rel=0.08)  # about 5B tokens


def test_help_shows_the_presets_values_not_the_class_defaults(tmp_path):
    shown = app("pretrain.py", "--help", cwd=tmp_path).stdout
    assert "config fields (the values of " in shown and "configs/tiny.yaml):" in shown
    values = {
        line.split()[0]: line.split()[1] for line in shown.splitlines() if line.startswith("  --model.")
    }
    assert (values["--model.vocab_size"], values["--model.hidden_dim"], values["--model.max_seq_len"]) == (
        "8192",
        "128",
        "512",
    )  # fmt: skip  (each unlike the class's default: 32000, 256, 4096)


@pytest.mark.parametrize("name", ["sample.py", "evaluate.py", "export_hf.py", "chat.py"])
def test_every_flag_of_the_other_apps_says_what_it_does_and_its_default(name, tmp_path):
    shown = app(name, "--help", cwd=tmp_path).stdout
    options = shown.split("options:", 1)[1]
    entries = re.split(r"\n  (?=--)", options)[1:]  # each flag with its description, wrapped or not
    assert len(entries) >= 3
    for entry in entries:
        text = " ".join(entry.split())
        assert "(required" in text or "default" in text, f"{name}: {text}"


def test_every_other_tools_name_for_an_apps_flag_names_one_of_ours(tmp_path):
    """Each entry of ``other_names.APP_FLAGS`` names a flag one of the apps that read a model has."""
    from meltemi.trainer.other_names import APP_FLAGS

    names = ("sample.py", "chat.py", "evaluate.py", "export_hf.py")
    shown = "".join(app(name, "--help", cwd=tmp_path).stdout for name in names)
    ours = set(re.findall(r"--[\w-]+", shown))
    assert len(ours) > 20
    for name, others in APP_FLAGS.items():
        for other in others:
            assert other.ours in ours, (name, other)


def test_another_tools_flag_is_answered_with_ours_before_anything_loads(tmp_path):
    result = app("sample.py", "--max_new_tokens", "20", "--model", "runs/x", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "sample.py: error: --max_new_tokens: not a flag of this command; did you mean --max-new-tokens?; "
        "--model: not a flag of this command; --model (llama.cpp, vLLM and lm-eval) is --checkpoint here"
    )


@pytest.mark.parametrize("name", ["evaluate.py", "sample.py", "export_hf.py", "chat.py"])
def test_a_checkpoint_path_that_does_not_exist_is_said_so_before_anything_loads(tmp_path, name):
    extra = {
        "evaluate.py": ["--tasks", "stdlib_next_line"],
        "sample.py": ["--prompt", "x"],
        "export_hf.py": ["--out", str(tmp_path / "hf")],
        "chat.py": ["--message", "hi"],
    }[name]
    result = app(name, "--checkpoint", str(tmp_path / "nowhere"), *extra, cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: {tmp_path / 'nowhere'} does not exist"  # nothing before it


def test_a_missing_checkpoint_is_refused_before_jax_is_imported(tmp_path):
    """The apps that read a trained model check ``--checkpoint`` by listings before their generation and
    scoring stacks load (about a second and a half of imports): each of them in one fresh process, which
    imports JAX only if one of them did. (``export_hf.py`` checks its target first, which needs them.)"""
    missing = str(tmp_path / "nowhere")
    code = f"""
import runpy, sys
for name, extra in [("sample.py", ["--prompt", "x"]), ("chat.py", ["--message", "hi"]),
                    ("evaluate.py", ["--tasks", "stdlib_next_line"])]:
    main = runpy.run_path({str(ROOT / "apps")!r} + "/" + name)["main"]
    try:
        main(["--checkpoint", {missing!r}, *extra])
    except SystemExit as e:
        print(name, e.code, "jax" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.splitlines() == [
        f"{name} 1 False" for name in ("sample.py", "chat.py", "evaluate.py")
    ]
    assert result.stderr.splitlines() == [f"error: {missing} does not exist"] * 3


@pytest.mark.parametrize(
    ("name", "extra", "default", "trained_by"),
    [
        ("sample.py", ["--prompt", "x"], "runs/tiny", "uv run apps/pretrain.py"),
        ("evaluate.py", ["--tasks", "stdlib_next_line"], "runs/tiny", "uv run apps/pretrain.py"),
        ("export_hf.py", ["--out", "hf"], "runs/tiny", "uv run apps/pretrain.py"),
        ("chat.py", ["--message", "hi"], "runs/tiny_sft", "uv run apps/sft.py"),
    ],
)
def test_without_checkpoint_the_default_run_is_read_and_its_absence_says_how_to_train_it(
    tmp_path, name, extra, default, trained_by
):
    result = app(name, *extra, cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"{name}: error: --checkpoint not given, and its default {default} does not exist: train it with "
        f"{trained_by}, or name a run or step-N directory with --checkpoint"
    )
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_default_runs_are_where_pretraining_and_fine_tuning_write_by_default():
    """``runs/<the default config's name>``, as the trainer's command names a run without --run-dir."""
    import runpy

    from meltemi.trainer.generate.flags import FINE_TUNED, PRETRAINED

    for default, name in ((PRETRAINED, "pretrain.py"), (FINE_TUNED, "sft.py")):
        config = runpy.run_path(str(ROOT / "apps" / name))["DEFAULT_CONFIG"]
        assert default.directory == f"runs/{config.stem}" and default.trained_by == f"uv run apps/{name}"


@pytest.mark.parametrize(("name", "flag"), [("sample.py", "--prompt"), ("chat.py", "--message")])
def test_an_empty_prompt_or_message_is_refused_before_anything_loads(tmp_path, name, flag):
    """An empty ``--message`` (an unset shell variable, say) was sent, and the model talked to nothing."""
    result = app(name, "--checkpoint", "runs/x", flag, "", cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"{name}: error: argument {flag}: must not be empty"
    piped = app(name, "--checkpoint", "runs/x", flag, "-", cwd=tmp_path, timeout=120, stdin="\n\n")
    assert piped.returncode == 2
    assert piped.stderr.strip().splitlines()[-1] == (
        f"{name}: error: argument {flag}: - reads the text from stdin, which held none"
    )
