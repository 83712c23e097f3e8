"""One run, several processes: two JAX processes of 4 CPU devices each (collectives over Gloo) train like one
process of 8 — the same batches step by step, and the final checkpoint equal — and resume after a kill.

Each process reads only its own rows of every batch and writes only its own shards of every checkpoint;
the first process commits the checkpoint once every process has written.
"""

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.step.fake_devices import fake_devices_environ

STEPS = 6
# Both tests compare against one single-process run (a module fixture), so they share a worker; they are
# among the suite's longest, so they start first.
pytestmark = [pytest.mark.xdist_group("multiprocess"), pytest.mark.slow]


@pytest.fixture(scope="module")
def config_path(small_config, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("multiprocess") / "config.yaml"
    path.write_text(dump_config(small_config))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(config_path: Path, run_dir: Path, processes: int, devices_each: int) -> list[subprocess.Popen]:
    port, launched = free_port(), []
    for index in range(processes):
        env = fake_devices_environ(devices_each)
        if processes > 1:
            env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(processes),
                       JAX_PROCESS_ID=str(index))  # fmt: skip
        command = [
            sys.executable,
            "-m",
            "meltemi.trainer",
            "--config",
            str(config_path),
            "--run-dir",
            str(run_dir),
        ]
        launched.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    return launched


def finish(processes: list[subprocess.Popen]) -> list[str]:
    """Wait for every process to succeed; their stderr."""
    errors = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        errors.append(err)
    return errors


def final_arrays(run_dir: Path) -> dict[str, np.ndarray]:
    step_dir = run_dir / "checkpoints" / f"step-{STEPS}"
    return {r.name: read_array(step_dir, r) for r in inspect_checkpoint(step_dir).arrays}


@pytest.fixture(scope="module")
def single(config_path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    finish(launch(config_path, run_dir, processes=1, devices_each=8))
    return run_dir


def test_two_processes_read_the_same_batches_and_end_where_one_process_ends(config_path, single, tmp_path):
    run_dir = tmp_path / "two"
    finish(launch(config_path, run_dir, processes=2, devices_each=4))
    assert (run_dir / "batches.jsonl").read_text() == (single / "batches.jsonl").read_text()
    assert len((run_dir / "batches.jsonl").read_text().splitlines()) == STEPS
    losses = [[json.loads(line)["train/loss"] for line in (d / "metrics.jsonl").read_text().splitlines()
               if "train/loss" in line] for d in (single, run_dir)]  # fmt: skip
    ours, theirs = final_arrays(run_dir), final_arrays(single)
    assert ours.keys() == theirs.keys()
    # The same SPMD program on the same 8-device mesh; only the all-reduces differ (Gloo between processes
    # against XLA's in-process collectives), which may sum in another order: float32 rounding, about 1e-7
    # relative per reduction, which Adam's bounded steps keep from growing over 6 steps.
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_killed_multiprocess_run_resumes_to_the_same_end(config_path, single, tmp_path):
    run_dir = tmp_path / "killed"
    first = launch(config_path, run_dir, processes=2, devices_each=4)
    committed = run_dir / "checkpoints" / "step-2" / "COMMITTED"

    deadline = time.monotonic() + 300
    while not committed.exists() and time.monotonic() < deadline and first[0].poll() is None:
        time.sleep(0.01)
    for process in first:
        process.kill()
        process.wait()
    resumed = finish(launch(config_path, run_dir, processes=2, devices_each=4))
    # The relaunch loads the programs the first launch compiled (the suite's compilation cache); the first
    # process speaks for the run.
    ready = next(line for line in resumed[0].splitlines() if line.startswith("ready in"))
    assert re.search(r"reused [1-9]\d* cached program", ready), ready
    for name, value in final_arrays(run_dir).items():
        np.testing.assert_allclose(value, final_arrays(single)[name], rtol=1e-4, atol=1e-6, err_msg=name)
