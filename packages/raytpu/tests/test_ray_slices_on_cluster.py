"""run_on_slices on a real local Ray cluster of two fake v4-16 slices (2 hosts each, fake TPU resources).

One cluster serves the whole module (starting raylets is the slow part); the test that kills a node runs
last, since the cluster stays one host short after it.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from ray import cloudpickle

from meltemi.raytpu import (
    EventLog,
    LocalSliceCluster,
    RetryPolicy,
    SliceJobError,
    SlicesUnavailableError,
    current_host,
    run_on_slices,
    slice_type,
)
from meltemi.raytpu.claims import claim_slices, release
from meltemi.raytpu.status import format_rows, slice_rows

# Under `--dist loadgroup` these tests share one xdist worker, and so one cluster.
pytestmark = pytest.mark.xdist_group("raytpu-cluster")

# Workloads defined here travel to the workers by value: the test module is not importable there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

V4_16 = slice_type("v4-16")
FAST = {"backoff_s": 0.0, "claim_wait_s": 5.0, "poll_interval_s": 0.2, "acquire_timeout_s": 60.0}
ONE_DEVICE_CPU_JAX = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


@pytest.fixture(scope="module")
def cluster():
    with LocalSliceCluster([(V4_16, 2)]) as running:
        yield running


def _wait_for(path: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.1)


def sum_over_all_processes():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    host = current_host()
    jax.distributed.initialize(**host.jax_distributed_kwargs())
    mesh = jax.make_mesh((jax.device_count(),), ("hosts",))
    local = np.full((jax.local_device_count(),), host.process_id + 1, np.float32)
    spread = jax.make_array_from_process_local_data(NamedSharding(mesh, P("hosts")), local)
    total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(spread)
    result = (jax.process_index(), jax.process_count(), float(total.addressable_data(0)))
    jax.distributed.shutdown()
    return result, {k: os.environ[k] for k in os.environ if k.startswith("MEGASCALE_")}


def test_a_jax_job_across_two_slices_of_two_hosts_sums_across_processes(cluster):
    results = run_on_slices(
        sum_over_all_processes,
        slice_type=V4_16,
        num_slices=2,
        max_retries_preemption=0,
        max_retries_failure=0,
        env=ONE_DEVICE_CPU_JAX,
        **FAST,
    )
    assert [r[0] for r in results] == [(i, 4, 10.0) for i in range(4)]
    megascale = [r[1] for r in results]
    assert [m["MEGASCALE_SLICE_ID"] for m in megascale] == ["0", "0", "1", "1"]
    assert {m["MEGASCALE_NUM_SLICES"] for m in megascale} == {"2"}
    assert {m["MEGASCALE_COORDINATOR_ADDRESS"] for m in megascale} == {"127.0.0.1"}


def where_am_i():
    host = current_host()
    return host.slice_name, host.host_id, host.num_slices, host.attempt


def test_a_list_of_slice_counts_runs_on_what_is_free(cluster):
    held = claim_slices(V4_16, [1], job_name="someone-else", wait_s=10)
    try:
        results = run_on_slices(
            where_am_i, slice_type=V4_16, num_slices=[1, 2], max_retries_preemption=0, max_retries_failure=0,
            **FAST,
        )  # fmt: skip
    finally:
        release(held)
    free = ({"v4-16-0", "v4-16-1"} - {held[0].info.name}).pop()
    assert results == [(free, 0, 1, 0), (free, 1, 1, 0)]


def test_the_status_command_shows_who_holds_each_slice(cluster):
    held = claim_slices(V4_16, [1], job_name="holder", wait_s=10)
    try:
        rows = slice_rows(ray.nodes(), ray.util.placement_group_table())
    finally:
        release(held)
    by_name = {row["slice"]: row for row in rows}
    assert by_name[held[0].info.name]["held_by"] == f"meltemi-raytpu/holder/{held[0].info.name}"
    assert [row["held_by"] for row in rows].count("free") == 1
    assert all(row["hosts_alive"] == [0, 1] and row["type"] == "v4-16" for row in rows)
    assert "v4-16-0" in format_rows(rows)


def test_python_m_meltemi_raytpu_status_lists_the_slices(cluster):
    command = [sys.executable, "-m", "meltemi.raytpu", "status", "--address", cluster.address]
    listed = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    rows = [line.split() for line in listed.splitlines()]
    assert rows[1:] == [["v4-16-0", "v4-16", "0,1", "free"], ["v4-16-1", "v4-16", "0,1", "free"]]


def test_the_head_node_cannot_be_killed_and_unknown_hosts_are_an_error(cluster):
    with pytest.raises(ValueError, match="the head node holds this driver's connection"):
        cluster.kill_host(cluster.node_ids("v4-16-0")[0])
    with pytest.raises(KeyError, match="no live fake host with node id 'nope'"):
        cluster.kill_host("nope")


def wait_for_more_slices(signal_dir, stop_on_interrupt=True):
    """On one slice: announce it, then wait until interrupted (a scale-up's drain) and record that the
    workload ended on its own; a workload that ignores the interrupt is killed after the drain timeout."""

    def fn():
        import signal

        host = current_host()
        if host.num_slices == 1:
            interrupted = []
            signal.signal(signal.SIGINT, lambda *_: interrupted.append(True) if stop_on_interrupt else None)
            (Path(signal_dir) / f"running-{host.host_id}").touch()
            deadline = time.monotonic() + 60
            while not interrupted and time.monotonic() < deadline:
                time.sleep(0.05)
            (Path(signal_dir) / f"drained-{host.host_id}").touch()
        return host.num_slices

    return fn


@pytest.mark.parametrize("cooperative", [True, False], ids=["drained", "killed-after-the-drain-timeout"])
def test_a_job_scales_up_when_more_slices_become_free(cluster, tmp_path, cooperative):
    held = claim_slices(V4_16, [1], job_name="someone-else", wait_s=10)
    log = EventLog(tmp_path / "events.jsonl", job="scaling")

    def give_back_when_running():
        _wait_for(tmp_path / "running-1")
        release(held)

    helper = threading.Thread(target=give_back_when_running)
    helper.start()
    results = run_on_slices(
        wait_for_more_slices(tmp_path, cooperative), slice_type=V4_16, num_slices=[1, 2],
        max_retries_preemption=0, max_retries_failure=0, scale_up_interval_s=0.5, drain_timeout_s=3.0,
        event_log=log, **FAST,
    )  # fmt: skip
    helper.join()
    assert results == [2, 2, 2, 2]
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    names = [e["event"] for e in events]
    assert names == ["slice_acquired", "drained", "scaled", "slice_acquired", "slice_acquired", "finished"]
    drained = events[1]
    assert drained["hosts"] == 2 and drained["killed"] == (0 if cooperative else 2)
    ended_on_their_own = sorted(p.name for p in tmp_path.glob("drained-*"))
    assert ended_on_their_own == (["drained-0", "drained-1"] if cooperative else [])


def fail_on_first_attempts(failing_attempts):
    def fn():
        host = current_host()
        if host.attempt < failing_attempts:
            raise ValueError(f"bad batch on attempt {host.attempt}")
        return host.attempt

    return fn


def test_an_exception_is_a_failure_and_is_retried_within_its_budget(cluster):
    log = EventLog()
    results = run_on_slices(
        fail_on_first_attempts(1), slice_type=V4_16, num_slices=1, max_retries_preemption=0,
        max_retries_failure=1, event_log=log, **FAST,
    )  # fmt: skip
    assert results == [1, 1]
    retries = [e for e in log.events if e["event"] == "retry"]
    assert [(e["cause"], e["retry"]) for e in retries] == [("failure", 1)]


def test_an_exhausted_failure_budget_raises_with_every_attempt_and_the_traceback(cluster):
    with pytest.raises(SliceJobError) as caught:
        run_on_slices(
            fail_on_first_attempts(10), slice_type=V4_16, num_slices=1,
            retry=RetryPolicy(max_retries_preemption=5, max_retries_failure=1, backoff_s=0.0),
            **{k: v for k, v in FAST.items() if k != "backoff_s"},
        )  # fmt: skip
    error = caught.value
    assert [(a.number, a.cause) for a in error.attempts] == [(0, "failure"), (1, "failure")]
    assert all(a.host_id in (0, 1) and a.slice_name.startswith("v4-16-") for a in error.attempts)
    assert "ValueError: bad batch on attempt 1" in error.remote_traceback
    assert type(error.workload_error) is ValueError  # the workload's own error, out of Ray's wrapper
    assert str(error.workload_error) == "bad batch on attempt 1"
    assert 'raise ValueError(f"bad batch on attempt {host.attempt}")' in error.remote_traceback
    assert "attempt 0 on 1 slice(s): failure at slice v4-16-" in str(error)
    assert isinstance(error.__cause__, ValueError)


def test_a_preemption_signal_counts_as_preemption_not_failure(cluster):
    signalled = []

    def preempted_once(info):
        signalled.append(info.name)
        return len(signalled) == 1

    log = EventLog()
    results = run_on_slices(
        where_am_i, slice_type=V4_16, num_slices=1, max_retries_preemption=1, max_retries_failure=0,
        preemption_check=preempted_once, event_log=log, **FAST,
    )  # fmt: skip
    assert [r[3] for r in results] == [1, 1]
    lost = [e for e in log.events if e["event"] == "slice_lost"]
    assert [(e["slice"], e["detail"]) for e in lost] == [(signalled[0], "preemption signal")]
    assert [e["cause"] for e in log.events if e["event"] == "retry"] == ["preemption"]


def test_asking_for_more_slices_than_exist_gives_up_with_a_clear_error(cluster):
    with pytest.raises(SlicesUnavailableError, match="could not claim 3 v4-16 slice"):
        run_on_slices(
            where_am_i, slice_type=V4_16, num_slices=3, max_retries_preemption=0, max_retries_failure=0,
            backoff_s=0, acquire_timeout_s=1.0, claim_wait_s=0.5,
        )  # fmt: skip


STEPS, GATE = 8, 3


def count_with_checkpoints(checkpoint_dir):
    """Each host adds ``step * (process + 1)`` for every step, recording its progress after each step; on a
    restart it resumes from its record. On attempt 0 every host stops at step GATE until it is killed."""

    def fn():
        host = current_host()
        record = Path(checkpoint_dir) / f"host-{host.process_id}.json"
        state = json.loads(record.read_text()) if record.exists() else {"step": 0, "total": 0}
        resumed_from = state["step"]
        for step in range(state["step"], STEPS):
            state = {"step": step + 1, "total": state["total"] + step * (host.process_id + 1)}
            scratch = record.with_suffix(".tmp")
            scratch.write_text(json.dumps(state))
            os.replace(scratch, record)
            if host.attempt == 0 and state["step"] == GATE:
                marker = Path(checkpoint_dir) / f"at-gate-{host.process_id}"
                marker.write_text(ray.get_runtime_context().get_node_id())
                time.sleep(60)
                raise TimeoutError("nobody killed this host")
        return state["total"], resumed_from, host.attempt

    return fn


def test_a_killed_node_is_a_preemption_and_the_job_resumes_from_its_checkpoint(cluster, tmp_path):
    log = EventLog(job="resume")
    outcome = {}

    def run():
        outcome["results"] = run_on_slices(
            count_with_checkpoints(tmp_path), slice_type=V4_16, num_slices=1, max_retries_preemption=1,
            max_retries_failure=0, event_log=log, **FAST,
        )  # fmt: skip

    job = threading.Thread(target=run)
    job.start()
    _wait_for(tmp_path / "at-gate-0")
    _wait_for(tmp_path / "at-gate-1")
    cluster.kill_host((tmp_path / "at-gate-1").read_text())
    job.join(timeout=240)

    uninterrupted = [sum(step * (process + 1) for step in range(STEPS)) for process in range(2)]
    assert outcome["results"] == [(uninterrupted[p], GATE, 1) for p in range(2)]
    lost = [e for e in log.events if e["event"] == "slice_lost"]
    assert len(lost) == 1 and lost[0]["host"] == 1 and "NodeDied" in lost[0]["detail"]
    assert [e["cause"] for e in log.events if e["event"] == "retry"] == ["preemption"]
