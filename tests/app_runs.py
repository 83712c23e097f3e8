"""Running the apps as a user does, for the integration tests: each app a subprocess on one CPU device (or
``devices``), and the newcomer's default command with a smaller model (``SMALL``)."""

import subprocess
import sys
from pathlib import Path

from meltemi.trainer.step.fake_devices import fake_devices_environ

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "--model.vocab_size", "512", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
    "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
    "--data.seq_len", "64", "--trainer.global_batch_size", "8", "--trainer.eval_batches", "2",
    "--trainer.log_every", "2", "--trainer.eval_every", "0",
]  # fmt: skip


def app(
    name: str, *args: str, cwd: Path, devices: int = 1, timeout: int = 600, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """``apps/<name> args`` run in ``cwd`` (``stdin`` its input, else none), its output captured."""
    env = fake_devices_environ(devices)
    command = [sys.executable, str(ROOT / "apps" / name), *args]
    given = {} if stdin is None else {"input": stdin}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, **given)
