"""What Ray's uv integration would cost each job, against workers that use the installed environment.

Under ``uv run``, Ray ships the driver's working directory to every worker and starts each worker with
``uv run`` there, which builds a virtual environment from ``uv.lock`` in the unpacked directory before the
workload imports anything. The alternative, which raytpu and ``apps/pretrain.py --launch ray`` use, is the
environment already installed on every node (``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0``; on a real cluster, a node
image with the ``uv sync`` of this repository baked in).

This script measures both on a local cluster of one fake ``cpu-1`` slice: the same trivial workload that
imports JAX (what every trainer host does first), run as a job through ``run_on_slices`` several times,
once with the installed environment and once with the runtime environment Ray's uv hook would set (this
repository's committed files as the ``working_dir`` package, ``uv run --frozen`` as the worker's
interpreter). Prints each job's seconds
and the median ratio, uv's over the installed one's, for the cold first job and for the warm later ones.

    uv run python benchmarks/raytpu_uv_environment.py [--jobs 3]
"""

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from meltemi.raytpu import LocalSliceCluster, run_on_slices

ROOT = Path(__file__).resolve().parents[1]


def import_jax() -> str:
    import jax

    return jax.__version__


def job_seconds(runtime_env: dict | None) -> float:
    started = time.perf_counter()
    run_on_slices(
        import_jax, slice_type="cpu-1", num_slices=1, max_retries_preemption=0, max_retries_failure=0,
        runtime_env=runtime_env, poll_interval_s=0.05,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="jobs per environment (the first one is cold)")
    jobs = parser.parse_args().jobs
    uv = shutil.which("uv")
    if uv is None:
        raise SystemExit("error: uv is not on PATH (pip install uv)")
    package = Path(tempfile.mkdtemp()) / "meltemi.zip"  # what Ray would upload: the tracked files
    subprocess.run(["git", "archive", "--format=zip", "--prefix=meltemi/", "-o", str(package), "HEAD"],
                   cwd=ROOT, check=True)  # fmt: skip
    uv_hook_env = {"working_dir": package.as_uri(), "py_executable": f"{uv} run --frozen --offline python"}
    with LocalSliceCluster([("cpu-1", 1)]):
        installed = [job_seconds(None) for _ in range(jobs)]
        with_uv = [job_seconds(uv_hook_env) for _ in range(jobs)]
    for name, seconds in (("installed environment", installed), ("uv run per worker", with_uv)):
        print(f"{name:>22}: " + "  ".join(f"{s:6.2f} s" for s in seconds))
    print(f"first job: uv / installed = {with_uv[0] / installed[0]:.2f}")
    if jobs > 1:
        warm = statistics.median(with_uv[1:]) / statistics.median(installed[1:])
        print(f"later jobs (median): uv / installed = {warm:.2f}")


if __name__ == "__main__":
    main()
