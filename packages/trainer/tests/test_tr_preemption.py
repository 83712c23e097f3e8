"""Preemption, for real: runs SIGKILLed mid-step and mid-checkpoint, then resumed, end bitwise equal to a run
never interrupted; SIGTERM saves and stops cleanly. Each run is a subprocess on one CPU device."""

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest

from meltemi.datastore.storage import Location
from meltemi.trainer.checkpoint.verify import verify_run
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.run.trackers import read_metrics
from meltemi.trainer.step.fake_devices import fake_devices_environ
from meltemi.trainer.trainer import Trainer

STEPS = 24


def launch(config_path: Path, run_dir: Path, **popen) -> subprocess.Popen:
    env = {**fake_devices_environ(1), "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "meltemi.trainer",
        "--config",
        str(config_path),
        "--run-dir",
        str(run_dir),
    ]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )


def step_files(run_dir: Path, step: int) -> dict[str, bytes]:
    root = run_dir / "checkpoints" / f"step-{step}"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def committed_steps(run_dir: Path) -> set[int]:
    return {int(p.parent.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*/COMMITTED")}


def uncommitted(run_dir: Path) -> bool:
    """Whether a checkpoint is being written: a ``step-N`` without its ``COMMITTED`` marker."""
    return any(not (p / "COMMITTED").exists() for p in (run_dir / "checkpoints").glob("step-*"))


def wait_for(condition, process: subprocess.Popen, timeout: float = 120) -> bool:
    """Poll ``condition`` every 2 ms until it holds (True) or the process ends (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    raise TimeoutError("the trainer neither reached the moment to kill nor finished")


@pytest.mark.slow
def test_five_sigkills_during_steps_and_checkpoint_writes_end_bitwise_equal(make_config, tmp_path):
    config = make_config("--trainer.num_train_steps", str(STEPS), "--trainer.checkpoint_every", "3",
                         "--trainer.log_every", "1", "--model.num_layers", "4")  # fmt: skip
    config_path = tmp_path / "config.yaml"
    config_path.write_text(dump_config(config))
    reference = tmp_path / "reference"
    done = launch(config_path, reference)
    assert done.wait(timeout=300) == 0, done.stderr.read()
    expected = step_files(reference, STEPS)

    run_dir, rng, kills = tmp_path / "killed", random.Random(0), []

    def metrics_lines() -> int:
        path = run_dir / "metrics.jsonl"
        return path.read_text().count("\n") if path.exists() else 0

    for attempt in range(5):
        process = launch(config_path, run_dir)
        before = committed_steps(run_dir) if (run_dir / "checkpoints").exists() else set()
        # Let every attempt commit one more checkpoint first, so the run makes progress between kills.
        reached = wait_for(
            lambda b=before: (run_dir / "checkpoints").exists() and committed_steps(run_dir) - b, process
        )
        if (
            attempt % 2 == 0
        ):  # during a checkpoint write: the moment the next one's step-N appears, not yet committed
            moment = "write"
            reached = reached and wait_for(lambda: uncommitted(run_dir), process)
        else:  # during steps: a random moment after one more step was logged
            moment, lines = "step", metrics_lines()
            reached = reached and wait_for(lambda n=lines: metrics_lines() > n, process)
            time.sleep(rng.uniform(0, 0.02))
        if reached:
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills.append((moment, sorted(before), sorted(committed_steps(run_dir))))
        else:
            assert process.returncode == 0, process.stderr.read()
    assert len(kills) == 5, kills
    assert kills[-1][2][-1] < STEPS, kills

    final = launch(config_path, run_dir)
    assert final.wait(timeout=300) == 0, final.stderr.read()
    assert "resuming from" in final.stderr.read()
    assert step_files(run_dir, STEPS) == expected
    logged = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in r]
    assert logged == list(range(1, STEPS + 1))  # the rows of steps redone after a kill were set aside


def test_sigterm_saves_a_checkpoint_at_the_step_boundary_and_exits_143(make_config, tmp_path):
    config = make_config("--trainer.num_train_steps", "400", "--trainer.checkpoint_every", "1000",
                         "--trainer.log_every", "1")  # fmt: skip
    config_path = tmp_path / "config.yaml"
    config_path.write_text(dump_config(config))
    run_dir = tmp_path / "run"
    process = launch(config_path, run_dir)
    assert wait_for(lambda: (run_dir / "metrics.jsonl").exists()
                    and '"train/loss"' in (run_dir / "metrics.jsonl").read_text(), process)  # fmt: skip
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err  # 128 + SIGTERM: stopped, not finished
    saved = sorted(committed_steps(run_dir))
    assert len(saved) == 1 and 0 < saved[0] < 400
    assert (
        f"stopped by SIGTERM after step {saved[0]}: saved {run_dir / 'checkpoints' / f'step-{saved[0]}'}"
        in err
    )
    assert "run the same command again to resume" in err and "stopped by SIGTERM" in out


def test_sigint_to_the_whole_process_group_twice_is_one_stop_that_saves_and_exits_130(make_config, tmp_path):
    """How ``timeout -s INT``, CI runners and supervisors stop a job without a terminal: every process of
    the group gets the signal, and a launcher such as ``uv run`` forwards its copy too, so the trainer sees
    it twice within milliseconds. That is one request: a checkpoint, no traceback, exit status 130."""
    config = make_config("--trainer.num_train_steps", "400", "--trainer.checkpoint_every", "1000",
                         "--trainer.log_every", "1")  # fmt: skip
    config_path = tmp_path / "config.yaml"
    config_path.write_text(dump_config(config))
    run_dir = tmp_path / "run"
    process = launch(config_path, run_dir, start_new_session=True)  # its own process group
    assert wait_for(lambda: (run_dir / "metrics.jsonl").exists()
                    and '"train/loss"' in (run_dir / "metrics.jsonl").read_text(), process)  # fmt: skip
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted" not in err
    saved = sorted(committed_steps(run_dir))
    assert len(saved) == 1 and 0 < saved[0] < 400
    assert f"stopped by SIGINT after step {saved[0]}" in err and "stopped by SIGINT" in out
    # answered at once, once for the two copies: the step it will stop after is the one it did stop after
    answer = f"stopping after step {saved[0]}: saving a checkpoint (press Ctrl-C again to abandon it)"
    assert err.count("stopping after step") == 1 and answer in err


def test_a_resume_reading_the_data_one_step_off_ends_elsewhere_and_verify_names_it(make_config, tmp_path):
    """The negative control of the bitwise comparison above: a resumption that reads the data one step
    ahead of its checkpoint's position must end with other bits (so the comparison can fail), and the
    audit of its checkpoints says the data position does not reproduce."""
    config = make_config("--trainer.num_train_steps", "6", "--trainer.checkpoint_every", "3",
                         "--trainer.keep_every", "3")  # fmt: skip
    Trainer(config, tmp_path / "reference", devices=jax.devices()[:1], progress=False).run()
    expected = step_files(tmp_path / "reference", 6)
    for name, offset in (("faithful", 0), ("one-step-off", 1)):
        run_dir = tmp_path / name
        checkpoint = run_dir / "checkpoints" / "step-3"
        shutil.copytree(tmp_path / "reference" / "checkpoints" / "step-3", checkpoint)
        trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
        batch = trainer.data.train.batch
        trainer.data.train.batch = lambda step, batch=batch, offset=offset: batch(step + offset)
        assert trainer.run().resumed_from == Location.parse(checkpoint)
    assert step_files(tmp_path / "faithful", 6) == expected
    assert step_files(tmp_path / "one-step-off", 6) != expected
    assert verify_run(tmp_path / "faithful").ok
    off = verify_run(tmp_path / "one-step-off").checkpoints[0]
    assert off.step == 6 and off.data == "differs", off.describe()


def test_a_fine_tuning_run_killed_after_a_checkpoint_resumes_to_the_same_bits(sft_config, tmp_path):
    """A fine-tuning run SIGKILLed mid-run resumes from its own checkpoint (not from its base again) and
    ends bitwise equal to one never interrupted."""
    config = sft_config("--trainer.num_train_steps", "8", "--trainer.checkpoint_every", "2",
                        "--trainer.log_every", "1", "--data.cache_dir", str(tmp_path / "cache"))  # fmt: skip
    config_path = tmp_path / "sft.yaml"
    config_path.write_text(dump_config(config))
    reference = launch(config_path, tmp_path / "reference")
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    run_dir = tmp_path / "killed"
    process = launch(config_path, run_dir)
    if wait_for(lambda: (run_dir / "checkpoints").exists() and committed_steps(run_dir), process):
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert sorted(committed_steps(run_dir))[-1] < 8
    final = launch(config_path, run_dir)
    assert final.wait(timeout=300) == 0, final.stderr.read()
    assert "resuming from" in final.stderr.read()
    assert step_files(run_dir, 8) == step_files(tmp_path / "reference", 8)
