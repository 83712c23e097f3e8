"""One run, several processes: two JAX processes of 2 CPU devices each (collectives over Gloo) train like one
process of 4 — the same batches step by step, and the final checkpoint equal — and, killed, resume to the
bits of the two-process run that was never killed: with the run directory on a shared disk, or on the S3
server or the GCS emulator (loopback) with nothing else shared, each process in its own scratch directory.

Each process reads only its own rows of every batch and writes only its own shards of every checkpoint;
the first process commits the checkpoint once every process has written.
"""

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from meltemi.datastore.storage import Directory
from meltemi.raytpu import free_listening_port
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.step.fake_devices import fake_devices_environ

STEPS = 6
# The tests compare against one single-process run and one two-process run (module fixtures), so they share
# a worker; they are among the suite's longest, so they start first.
pytestmark = [pytest.mark.xdist_group("multiprocess"), pytest.mark.slow]


@pytest.fixture(scope="module")
def config_path(small_config, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("multiprocess") / "config.yaml"
    path.write_text(dump_config(small_config))
    return path


def launch(config_path: Path, run_dir: Path, processes: int, devices_each: int) -> list[subprocess.Popen]:
    port, launched = free_listening_port("127.0.0.1"), []
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


def final_arrays(run_dir: Path | str) -> dict[str, np.ndarray]:
    """The last checkpoint's arrays, from a run directory or a run's URL."""
    step_dir = f"{run_dir}/checkpoints/step-{STEPS}"
    return {r.name: read_array(step_dir, r) for r in inspect_checkpoint(step_dir).arrays}


def assert_bitwise_equal(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    assert ours.keys() == theirs.keys()
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)


@pytest.fixture(scope="module")
def single(config_path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    finish(launch(config_path, run_dir, processes=1, devices_each=4))
    return run_dir


@pytest.fixture(scope="module")
def two(config_path, tmp_path_factory) -> Path:
    """The run on two processes, never killed."""
    run_dir = tmp_path_factory.mktemp("two") / "run"
    finish(launch(config_path, run_dir, processes=2, devices_each=2))
    return run_dir


def test_two_processes_read_the_same_batches_and_end_where_one_process_ends(single, two):
    run_dir = two
    assert (run_dir / "batches.jsonl").read_text() == (single / "batches.jsonl").read_text()
    assert len((run_dir / "batches.jsonl").read_text().splitlines()) == STEPS
    losses = [[json.loads(line)["train/loss"] for line in (d / "metrics.jsonl").read_text().splitlines()
               if "train/loss" in line] for d in (single, run_dir)]  # fmt: skip
    ours, theirs = final_arrays(run_dir), final_arrays(single)
    assert ours.keys() == theirs.keys()
    # The same SPMD program on the same 4-device mesh; only the all-reduces differ (Gloo between processes
    # against XLA's in-process collectives), which may sum in another order: float32 rounding, about 1e-7
    # relative per reduction, which Adam's bounded steps keep from growing over 6 steps.
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    for name in ours:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_a_killed_multiprocess_run_resumes_to_the_same_end(config_path, single, two, tmp_path):
    run_dir = tmp_path / "killed"
    first = launch(config_path, run_dir, processes=2, devices_each=2)
    committed = run_dir / "checkpoints" / "step-2" / "COMMITTED"

    deadline = time.monotonic() + 300
    while not committed.exists() and time.monotonic() < deadline and first[0].poll() is None:
        time.sleep(0.01)
    for process in first:
        process.kill()
        process.wait()
    resumed = finish(launch(config_path, run_dir, processes=2, devices_each=2))
    # The relaunch loads the programs the first launch compiled (the suite's compilation cache); the first
    # process speaks for the run.
    ready = next(line for line in resumed[0].splitlines() if line.startswith("ready in"))
    assert re.search(r"reused [1-9]\d* cached program", ready), ready
    for name, value in final_arrays(run_dir).items():
        np.testing.assert_allclose(value, final_arrays(single)[name], rtol=1e-4, atol=1e-6, err_msg=name)
    assert_bitwise_equal(final_arrays(run_dir), final_arrays(two))  # as if never killed, to the bit


# What `python -m meltemi.trainer --run-dir URL` does, in short: join the job, train the config in the run.
DRIVER = """
import sys
from meltemi.trainer.step.distributed import initialize_from_environment
initialize_from_environment()
from meltemi.trainer.cli import exit_process
from meltemi.trainer.config_io import load_config
from meltemi.trainer.trainer import Trainer
Trainer(load_config(sys.argv[1], []), sys.argv[2], progress=False).run()
exit_process(0)
"""


def launch_in_scratch(config_path: Path, url: str, scratch: Path) -> list[subprocess.Popen]:
    """Two processes training the run at ``url``, each in its own directory: nothing shared but the bucket."""
    port, launched = free_listening_port("127.0.0.1"), []
    for index in range(2):
        cwd = scratch / f"host-{index}"
        cwd.mkdir(parents=True, exist_ok=True)
        env = {**fake_devices_environ(2), "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(index)}  # fmt: skip
        command = [sys.executable, "-c", DRIVER, str(config_path), url]
        launched.append(subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True))
    return launched


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_two_process_run_in_a_bucket_killed_and_relaunched_ends_bitwise_as_one_never_killed(
    request, server, config_path, two, tmp_path
):
    fake = request.getfixturevalue(server)  # its environment set: the processes inherit it
    url = f"{fake.bucket_url()}/killed"
    first = launch_in_scratch(config_path, url, tmp_path / "killed")
    run = Directory(url)
    deadline = time.monotonic() + 300
    while not run.exists("checkpoints/step-2/COMMITTED") and time.monotonic() < deadline:
        assert first[0].poll() is None, first[0].stderr.read()
        time.sleep(0.05)
    first[1].send_signal(signal.SIGKILL)  # one host lost mid-run
    first[1].wait()
    first[0].kill()  # the launcher stops the job's other process, which waits in a collective
    first[0].wait()
    assert not run.exists(f"checkpoints/step-{STEPS}/COMMITTED")
    finish(launch_in_scratch(config_path, url, tmp_path / "relaunched"))
    # Against the same two-process run on a local disk, never killed: the same bits, the same batches.
    assert_bitwise_equal(final_arrays(url), final_arrays(two))
    assert run.read_bytes("batches.jsonl") == (two / "batches.jsonl").read_bytes()


# One process of a two-process Hugging Face import onto the run's 4-device mesh: the bytes of tensor data it
# reads, and every shard its devices hold checked against the same file imported whole onto one device.
IMPORT_CHILD = """
import json, sys
import jax, numpy as np
from meltemi.trainer.step.distributed import initialize_from_environment
initialize_from_environment()
from meltemi.trainer.config_io import load_config
from meltemi.trainer.hf import import_hf
from meltemi.trainer.hf.safetensors_reader import SafetensorsReader
from meltemi.trainer.step.mesh import MeshPlan
config = load_config(sys.argv[1])
read, real = [], SafetensorsReader._read
def counted(self, file, start, stop, what):
    read.append(stop - start if what.startswith("the tensor ") else 0)
    return real(self, file, start, stop, what)
SafetensorsReader._read = counted
_, sharded = import_hf(sys.argv[2], config.model, plan=MeshPlan.of(config))
SafetensorsReader._read = real
_, whole = import_hf(sys.argv[2], config.model)
for got, want in zip(jax.tree.leaves(sharded), jax.tree.leaves(whole), strict=True):
    for shard in got.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), np.asarray(want)[shard.index])
shards = sum(len(x.addressable_shards) for x in jax.tree.leaves(sharded))
print(json.dumps({"read": sum(read), "shards": shards}))
"""


def test_each_process_of_a_hugging_face_import_reads_only_what_its_devices_cover(config_path, tmp_path):
    """Two processes of 2 devices import one export onto the run's mesh (``embed`` split four ways): each
    holds the right values on its devices and reads of every tensor only the span its devices cover — half
    of a tensor whose first dimension is ``embed`` (``o_proj``, ``down_proj``, the norms), the whole of one
    split along its last (a span of rows) — so less than the whole export (92% here)."""
    import jax

    from meltemi.trainer.config_io import load_config
    from meltemi.trainer.hf import export_hf
    from meltemi.trainer.hf.safetensors_reader import SafetensorsReader
    from meltemi.trainer.model.llama import Llama

    config = load_config(config_path)
    out = export_hf(Llama.init(config.model, key=jax.random.key(3)), tmp_path / "hf")
    total = sum(int(np.prod(shape)) * 4 for shape in SafetensorsReader(out).shapes.values())
    port, launched = free_listening_port("127.0.0.1"), []
    for index in range(2):
        env = {**fake_devices_environ(2), "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(index)}  # fmt: skip
        command = [sys.executable, "-c", IMPORT_CHILD, str(config_path), str(out)]
        launched.append(
            subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    reports = []
    for process in launched:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        reports.append(json.loads(stdout.splitlines()[-1]))
    print(f"export {total} bytes of tensors; read per process: {[r['read'] for r in reports]}")
    for report in reports:
        assert report["shards"] > 0
        assert report["read"] < total
