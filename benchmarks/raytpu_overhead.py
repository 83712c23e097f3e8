"""What run_on_slices costs over bare Ray tasks, and how long it takes to recover from a lost node.

On a local cluster of two fake one-host slices (`cpu-1`), a trivial job runs on both slices through
`run_on_slices` and, as the reference in the same run, as bare Ray tasks pinned to the same two nodes (one
fresh worker process per task, as run_on_slices uses). Prints the median seconds per job of each and their
ratio (the price of claiming slices, probing a coordinator port and setting up the environment). Then a job
on one slice has its node killed mid-run; prints the seconds from the kill to the retried job's result
(Ray noticing the death, the retry claiming the other slice, and the rerun).

    uv run python benchmarks/raytpu_overhead.py
"""

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from meltemi.raytpu import LocalSliceCluster, current_host, run_on_slices, slice_type
from meltemi.raytpu.claims import claim_slices, release


def process_id() -> int:
    return os.getpid()


@ray.remote(max_calls=1, max_retries=0, num_cpus=1)
def bare_task() -> int:
    return os.getpid()


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def overhead(cluster: LocalSliceCluster, rounds: int) -> tuple[float, float]:
    nodes = [cluster.node_ids(name)[0] for name in cluster.slice_names()]

    def bare():
        pinned = [NodeAffinitySchedulingStrategy(node, soft=False) for node in nodes]
        ray.get([bare_task.options(scheduling_strategy=s).remote() for s in pinned])

    def ours():
        run_on_slices(
            process_id, slice_type="cpu-1", num_slices=2, max_retries_preemption=0, max_retries_failure=0,
            poll_interval_s=0.05,
        )  # fmt: skip

    bare_s, ours_s = [], []
    for _ in range(rounds):
        bare_s.append(timed(bare))
        ours_s.append(timed(ours))
    return statistics.median(bare_s), statistics.median(ours_s)


def gated(gate_dir: str):
    def fn():
        host = current_host()
        if host.attempt == 0:
            (Path(gate_dir) / "running").write_text(ray.get_runtime_context().get_node_id())
            time.sleep(120)
        return host.attempt

    return fn


def recovery(cluster: LocalSliceCluster) -> float:
    gate_dir = tempfile.mkdtemp()
    # Hold the slice on the head node (which cannot be killed), so the job lands on the other one.
    held = claim_slices(slice_type("cpu-1"), [1], job_name="benchmark-hold", wait_s=10)
    finished = {}

    def job():
        run_on_slices(
            gated(gate_dir), slice_type="cpu-1", num_slices=1, max_retries_preemption=1,
            max_retries_failure=0, backoff_s=0, poll_interval_s=0.05,
        )  # fmt: skip
        finished["at"] = time.perf_counter()

    runner = threading.Thread(target=job)
    runner.start()
    marker = Path(gate_dir) / "running"
    while not marker.exists():
        time.sleep(0.05)
    killed_at = time.perf_counter()
    cluster.kill_host(marker.read_text())
    release(held)
    runner.join()
    return finished["at"] - killed_at


def main(rounds: int = 3) -> None:
    with LocalSliceCluster([("cpu-1", 2)]) as cluster:
        bare_s, ours_s = overhead(cluster, rounds)
        print(f"bare Ray tasks on 2 nodes:      {bare_s:.3f} s per job (median of {rounds})")
        print(f"run_on_slices on 2 slices:      {ours_s:.3f} s per job (median of {rounds})")
        print(f"ratio run_on_slices / bare:     {ours_s / bare_s:.2f}")
        print(f"kill of a host to retried result: {recovery(cluster):.2f} s")


if __name__ == "__main__":
    main()
