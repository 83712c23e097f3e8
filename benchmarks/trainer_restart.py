"""What the persistent compilation cache saves a restart: seconds from launching ``apps/pretrain.py`` to its
first step when resuming the tiny run, with an empty cache (cold: a new machine after a preemption) and with
the cache the cold start filled (warm); and the wall time of a second identical 8B dry run against the first.

Each process is a user's command (``python apps/pretrain.py``) in the repository root, so the default corpus
under ``.cache/meltemi`` is built once and reused; the run directory and the caches are temporary. A restart
is timed to the trainer's ``ready in`` line (printed just before the first step is dispatched), then stopped.
The last lines are ``restart ratio: <warm / cold>`` (target: at most 0.5) and ``dry-run ratio: <second /
first>`` (target: at most 0.4).

Both restarts find Python's bytecode as a user's machine keeps it after its first run. Where
``PYTHONDONTWRITEBYTECODE`` is set and the environment was installed without ``uv sync --compile-bytecode``
(as ``.ci/run`` does), every process compiles each module it imports again (over a second with JAX, the
same for cold and warm); the first line says which case this is.

With ``--bucket``, the run lives in a bucket on the S3 server (moto, on loopback) and each restart is a
replacement host: an empty HOME, so an empty local cache. Cold: the bucket's compile-cache mirror is empty
(a fresh folder each repeat); warm: another empty HOME, the mirror filled by the cold restart. The last line
is then ``bucket restart ratio: <warm / cold>`` (target: at most 0.5).

    uv run python benchmarks/trainer_restart.py [--repeats 3] [--no-dry-run] [--bucket]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "2", "--trainer.keep_every", "2"]
TINY += ["--trainer.eval_batches", "1"]


def environment(cache: Path, home: Path | None = None) -> dict[str, str]:
    """The user's environment with ``cache`` as the compilation cache; with ``home``, a new host's instead:
    that HOME, and the cache where the trainer puts it by default (``~/.cache/meltemi/jax``)."""
    drop = ("JAX_PERSISTENT_CACHE", "JAX_COMPILATION", "XLA_FLAGS")  # the defaults, as a user gets them
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    if home is not None:
        env.pop("XDG_CACHE_HOME", None)
        return env | {"HOME": str(home)}
    return env | {"JAX_COMPILATION_CACHE_DIR": str(cache)}


def seconds_to_ready(
    run_dir: Path | str, cache: Path, *extra: str, home: Path | None = None
) -> tuple[float, str]:
    """Launch the tiny run's resume; the seconds until it says it is ready to step, and that line."""
    command = [sys.executable, str(ROOT / "apps" / "pretrain.py"), "--run-dir", str(run_dir), *TINY, *extra]
    started = time.perf_counter()
    env = environment(cache, home)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stderr:
            if line.startswith("ready in"):
                return time.perf_counter() - started, line.strip()
        raise RuntimeError(f"the run ended (status {process.wait()}) without a 'ready in' line")
    finally:
        process.kill()
        process.wait()


def restart(run_dir: Path) -> None:
    """Back to the state a preempted run leaves: the step-2 checkpoint, nothing after it."""
    for step_dir in (run_dir / "checkpoints").glob("*step-*"):
        if step_dir.name != "step-2":
            shutil.rmtree(step_dir)


def bucket_restarts(repeats: int, scratch: Path) -> None:
    """Cold and warm restarts of the tiny run in a bucket, each on a new host (an empty HOME)."""
    from meltemi.datastore.storage import Directory
    from meltemi.datastore.testing import start_s3_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's line per request
    server = start_s3_server()
    os.environ.update(server.environ)
    try:
        bucket = server.make_bucket("restart")
        run = f"s3://{bucket}/runs/tiny"
        setup = subprocess.run(
            [sys.executable, str(ROOT / "apps" / "pretrain.py"), "--run-dir", run, *TINY,
             "--trainer.compile_cache_mirror", f"s3://{bucket}/setup-mirror"],
            cwd=ROOT, env=environment(scratch / "setup-cache"), capture_output=True, text=True,
        )  # fmt: skip
        if setup.returncode != 0:
            raise RuntimeError(setup.stderr)
        checkpoints = Directory(f"{run}/checkpoints")
        cold, warm = [], []
        for repeat in range(repeats):
            mirror = ["--trainer.compile_cache_mirror", f"s3://{bucket}/mirror-{repeat}"]
            for kind, times in (("cold", cold), ("warm", warm)):
                checkpoints.delete_prefix("step-4/")
                home = scratch / f"home-{repeat}-{kind}"
                home.mkdir()
                seconds, line = seconds_to_ready(run, home, *mirror, home=home)
                times.append(seconds)
                print(f"bucket {kind} {seconds:5.1f} s  {line}")
        cold_s, warm_s = statistics.median(cold), statistics.median(warm)
        print(f"a new host's restart from s3:// (median): cold {cold_s:.1f} s, warm {warm_s:.1f} s")
        print(f"bucket restart ratio: {warm_s / cold_s:.2f}")
    finally:
        server.stop()


def dry_run_seconds(cache: Path) -> float:
    command = [sys.executable, str(ROOT / "apps" / "pretrain.py"), "--config", "configs/marin_8b.yaml"]
    started = time.perf_counter()
    done = subprocess.run([*command, "--dry-run"], cwd=ROOT, env=environment(cache), capture_output=True)
    if done.returncode not in (0, 2):  # 2: the plan does not fit, which is still a plan
        raise RuntimeError(done.stderr.decode())
    return time.perf_counter() - started


def bytecode_state() -> str:
    """Whether JAX's modules (the bulk of a start's imports) load from cached bytecode, and why not."""
    origin = importlib.util.find_spec("jax").origin
    if os.path.exists(importlib.util.cache_from_source(origin)):
        return "bytecode: cached"
    if sys.flags.dont_write_bytecode:
        return (
            "bytecode: NOT cached (PYTHONDONTWRITEBYTECODE is set and the environment was installed without "
            "it): every process compiles its imports; `uv sync --compile-bytecode` once removes that cost"
        )
    return "bytecode: not cached yet (the first process writes it)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="cold and warm restarts each")
    parser.add_argument("--no-dry-run", action="store_true", help="skip the 8B dry-run pair")
    parser.add_argument(
        "--bucket", action="store_true", help="new hosts restarting a run in a bucket instead"
    )
    args = parser.parse_args()
    print(bytecode_state())
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if args.bucket:
            bucket_restarts(args.repeats, scratch)
            return
        run_dir = scratch / "run"
        setup = subprocess.run(
            [sys.executable, str(ROOT / "apps" / "pretrain.py"), "--run-dir", str(run_dir), *TINY],
            cwd=ROOT, env=environment(scratch / "setup-cache"), capture_output=True, text=True,
        )  # fmt: skip
        if setup.returncode != 0:
            raise RuntimeError(setup.stderr)
        cold, warm = [], []
        for repeat in range(args.repeats):
            cache = scratch / f"cache-{repeat}"
            restart(run_dir)
            seconds, line = seconds_to_ready(run_dir, cache)
            cold.append(seconds)
            print(f"cold {seconds:5.1f} s  {line}")
            restart(run_dir)
            seconds, line = seconds_to_ready(run_dir, cache)
            warm.append(seconds)
            print(f"warm {seconds:5.1f} s  {line}")
        cold_s, warm_s = statistics.median(cold), statistics.median(warm)
        print(f"restart to the first step (median): cold {cold_s:.1f} s, warm {warm_s:.1f} s")
        print(f"restart ratio: {warm_s / cold_s:.2f}")
        if not args.no_dry_run:
            first = dry_run_seconds(scratch / "dry-run-cache")
            second = dry_run_seconds(scratch / "dry-run-cache")
            print(f"8B dry run: first {first:.1f} s, second {second:.1f} s")
            print(f"dry-run ratio: {second / first:.2f}")


if __name__ == "__main__":
    main()
