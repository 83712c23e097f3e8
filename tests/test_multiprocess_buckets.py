"""Two JAX processes with no shared disk: the run directory and its checkpoints on the S3 server (loopback),
each process in its own scratch directory. One process is SIGKILLed mid-run (the other then stopped, as a
launcher does), the job relaunched, and the final checkpoint read back from the bucket is bitwise the
uninterrupted two-process run's.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meltemi.datastore.storage import Directory
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.step.fake_devices import fake_devices_environ
from tests.test_multiprocess import STEPS, free_port

pytestmark = [pytest.mark.xdist_group("multiprocess"), pytest.mark.slow]

# What `python -m meltemi.trainer --run-dir URL` does, in short: join the job, train the config in the run.
DRIVER = """
import sys
from meltemi.trainer.step.distributed import initialize_from_environment
initialize_from_environment()
from meltemi.trainer.config_io import load_config
from meltemi.trainer.trainer import Trainer
Trainer(load_config(sys.argv[1], []), sys.argv[2], progress=False).run()
"""


def launch(config: Path, url: str, scratch: Path) -> list[subprocess.Popen]:
    port, launched = free_port(), []
    for index in range(2):
        cwd = scratch / f"host-{index}"  # each process's own disk: nothing shared but the bucket
        cwd.mkdir(parents=True, exist_ok=True)
        env = {**fake_devices_environ(4),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(index)}  # fmt: skip
        command = [sys.executable, "-c", DRIVER, str(config), url]
        launched.append(subprocess.Popen(command, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True))
    return launched


def finish(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err


def final_bytes(url: str) -> dict[str, bytes]:
    step = f"{url}/checkpoints/step-{STEPS}"
    return {r.name: read_array(step, r).tobytes() for r in inspect_checkpoint(step).arrays}


def test_a_two_process_run_in_a_bucket_killed_and_relaunched_ends_bitwise_as_one_never_killed(
    s3, small_config, tmp_path
):
    config = tmp_path / "config.yaml"
    config.write_text(dump_config(small_config))
    bucket = s3.make_bucket()
    whole, killed = f"s3://{bucket}/whole", f"s3://{bucket}/killed"
    finish(launch(config, whole, tmp_path / "whole"))

    first = launch(config, killed, tmp_path / "killed")
    run = Directory(killed)
    deadline = time.monotonic() + 300
    while not run.exists("checkpoints/step-2/COMMITTED") and time.monotonic() < deadline:
        assert first[0].poll() is None, first[0].stderr.read()
        time.sleep(0.05)
    first[1].send_signal(signal.SIGKILL)  # one host lost mid-run
    first[1].wait()
    first[0].kill()  # the launcher stops the job's other process, which waits in a collective
    first[0].wait()
    assert not run.exists(f"checkpoints/step-{STEPS}/COMMITTED")
    finish(launch(config, killed, tmp_path / "relaunched"))
    assert final_bytes(killed) == final_bytes(whole)
    assert Directory(whole).read_bytes("batches.jsonl") == run.read_bytes("batches.jsonl")
