"""Metrics reach metrics.jsonl always, TensorBoard and Weights & Biases (offline) when configured."""

import json
import os
import tempfile

import jax
import pytest

from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.trainer import Trainer


def test_a_run_logs_to_every_configured_tracker(make_config, run_dir, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is not installed: the trainer's [wandb] extra")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    config = make_config("--trainer.num_train_steps", "4", "--trainer.trackers.tensorboard", "true",
                         "--trainer.trackers.wandb", "{mode: offline, project: test}",
                         "--trainer.plots", "true")  # fmt: skip
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
    summary = Trainer(config, run_dir, devices=jax.devices()[:1], progress=True).run()
    assert summary.plot_path is None and not (run_dir / "loss.png").exists()  # trainer.plots false
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "compiled the train step" in captured.err and "step 2/2  loss" in captured.err


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_profiler_traces_the_configured_steps_into_the_run_local_or_in_a_bucket(
    request, where, make_config, run_dir, monkeypatch, tmp_path
):
    """JAX's profiler reaches no s3:// location itself: a bucket run's trace is copied there (it failed at
    the end of the traced steps), with nothing left in the temporary directory it was written to."""
    config = make_config(
        "--trainer.num_train_steps", "3", "--trainer.profiler", "{start_step: 1, num_steps: 1}"
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    run = str(run_dir) if where == "local" else f"{request.getfixturevalue('s3').bucket_url()}/runs/tiny"
    Trainer(config, run, devices=jax.devices()[:1], progress=False).run()
    profile = Directory(Location.parse(run) / "profile")
    traces = [key for key in profile.list() if key.endswith(".xplane.pb")]
    assert len(traces) == 1 and len(profile.read_bytes(traces[0])) > 0
    assert list(scratch.iterdir()) == []


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
