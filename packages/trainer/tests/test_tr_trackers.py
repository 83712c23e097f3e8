"""Metrics reach metrics.jsonl always, TensorBoard and Weights & Biases (offline) when configured."""

import json
import os

import jax
import pytest

from meltemi.trainer.trainer import Trainer


def test_a_run_logs_to_every_configured_tracker(make_config, run_dir, monkeypatch):
    pytest.importorskip("wandb", reason="Weights & Biases is the trainer's [wandb] extra")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = make_config("--trainer.num_train_steps", "4", "--trainer.trackers.tensorboard", "true",
                         "--trainer.trackers.wandb", "{mode: offline, project: test}")  # fmt: skip
    Trainer(config, run_dir, devices=jax.devices()[:1], progress=False).run()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    assert [r["step"] for r in train] == [2, 4]
    assert {"train/grad_norm", "train/learning_rate", "throughput/tokens_per_second", "train/z_loss"} <= set(
        train[0]
    )
    assert [r["step"] for r in records if "eval/loss" in r] == [0, 4]
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(run_dir / "tensorboard"))
    runs = [p for p in (run_dir / "wandb").iterdir() if p.name.startswith("offline-run")]
    assert len(runs) == 1 and any(p.suffix == ".wandb" for p in runs[0].iterdir())
    assert (run_dir / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert "num_train_steps: 4" in (run_dir / "config.yaml").read_text()


def test_progress_lines_go_to_stderr_off_a_terminal(make_config, run_dir, capsys):
    config = make_config("--trainer.num_train_steps", "2")
    Trainer(config, run_dir, devices=jax.devices()[:1], progress=True).run()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "compiled the train step" in captured.err and "step 2/2  loss" in captured.err


def test_the_profiler_traces_the_configured_steps(make_config, run_dir):
    config = make_config(
        "--trainer.num_train_steps", "3", "--trainer.profiler", "{start_step: 1, num_steps: 1}"
    )
    Trainer(config, run_dir, devices=jax.devices()[:1], progress=False).run()
    traces = list((run_dir / "profile").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0


def test_every_logged_step_counts_its_own_tokens_checkpoints_between_them(make_config, run_dir):
    """Metrics are read one step behind the dispatch; a checkpoint reads them early. Each report still counts
    the tokens of the steps it reports (it once counted those dispatched, so a step before a checkpoint
    showed 0 tok/s and the next one twice its tokens)."""
    config = make_config("--trainer.log_every", "1", "--trainer.checkpoint_every", "2")
    summary = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False).run()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    speeds = [r["throughput/tokens_per_second"] for r in records if "train/loss" in r]
    assert len(speeds) == 6 and min(speeds) > 0, speeds
    assert summary.tokens_per_second > 0
