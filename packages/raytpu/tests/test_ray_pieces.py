"""The parts of raytpu that need no cluster: slice types, discovery, host environments, outcomes, events."""

import io
import json
import os

import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st
from ray import PlacementGroupID
from ray import exceptions as rex
from ray.util.placement_group import PlacementGroup

from meltemi.raytpu import (
    EventLog,
    HostEnv,
    NotConnectedError,
    NotInJobError,
    RaytpuError,
    RetryPolicy,
    SliceJobError,
    SlicesUnavailableError,
    StatusLine,
    current_host,
    discover_slices,
    run_on_slices,
    slice_type,
    tpu_slice,
)
from meltemi.raytpu.claims import SliceClaim, host_bundle
from meltemi.raytpu.host_env import host_envs
from meltemi.raytpu.hosts import host_task_options
from meltemi.raytpu.inventory import SliceInfo
from meltemi.raytpu.local_cluster import LocalSliceCluster, fake_host_args
from meltemi.raytpu.outcomes import Attempt, classify, remote_traceback, short_detail
from meltemi.raytpu.runner import acceptable_slice_counts
from meltemi.raytpu.slices import TPU_GENERATIONS
from meltemi.raytpu.status import format_rows, slice_rows


@pytest.mark.parametrize(
    ("name", "hosts", "chips_per_host", "head"),
    [
        ("v4-8", 1, 4, "TPU-v4-8-head"),
        ("v4-16", 2, 4, "TPU-v4-16-head"),
        ("v5p-128", 16, 4, "TPU-v5p-128-head"),
        ("v5litepod-8", 1, 8, "TPU-v5litepod-8-head"),
        ("v5e-16", 4, 4, "TPU-v5litepod-16-head"),
        ("v5litepod-256", 64, 4, "TPU-v5litepod-256-head"),
        ("v6e-4", 1, 4, "TPU-v6e-4-head"),
        ("v6e-256", 64, 4, "TPU-v6e-256-head"),
        ("gpu-8", 1, 8, None),
        ("cpu-2", 2, 1, "cpu-2-head"),
    ],
)
def test_the_slice_table_knows_hosts_chips_and_head_resources(name, hosts, chips_per_host, head):
    kind = slice_type(name)
    assert (kind.hosts, kind.chips_per_host, kind.head_resource) == (hosts, chips_per_host, head)


@given(st.sampled_from(sorted(TPU_GENERATIONS)), st.data())
def test_every_tpu_size_splits_its_chips_evenly_over_hosts(generation, data):
    gen = TPU_GENERATIONS[generation]
    size = data.draw(st.sampled_from(gen.sizes))
    kind = tpu_slice(generation, size)
    assert kind.chips * gen.cores_per_chip_in_name == size
    assert kind.hosts == 1 or kind.chips_per_host == gen.chips_per_host
    assert slice_type(kind.name) == kind


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("v4-12", ValueError, "v4-12 is not a TPU slice size"),
        ("v9-8", ValueError, "unknown TPU generation 'v9'"),
        ("tpu", ValueError, "not of the form '<generation>-<size>'"),
        ("gpu-0", ValueError, "gpus_per_host must be a positive integer"),
        (16, TypeError, "slice_type must be a name"),
    ],
)
def test_bad_slice_types_say_what_is_wrong(spec, error, message):
    with pytest.raises(error, match=message):
        slice_type(spec)


def _node(slice_name, worker, pod="v4-16", alive=True, node_id=None):
    return {
        "Alive": alive,
        "NodeID": node_id or f"{slice_name}-{worker}",
        "NodeManagerAddress": "127.0.0.1",
        "Resources": {"TPU": 4},
        "Labels": {
            "ray.io/tpu-slice-name": slice_name,
            "ray.io/tpu-worker-id": str(worker),
            "ray.io/tpu-pod-type": pod,
        },
    }


def test_discovery_groups_hosts_by_slice_and_marks_slices_with_a_dead_host():
    nodes = [_node("b", 1), _node("a", 0), _node("b", 0), _node("a", 1, alive=False)]
    nodes.append(_node("c", 0, pod="v4-8"))
    found = discover_slices(slice_type("v4-16"), nodes)
    assert [(s.name, [h.worker_id for h in s.hosts], s.intact) for s in found] == [
        ("a", [0], False),
        ("b", [0, 1], True),
    ]


def test_gpu_nodes_with_enough_gpus_are_one_host_slices():
    nodes = [
        {"Alive": True, "NodeID": "big", "Resources": {"GPU": 8}},
        {"Alive": True, "NodeID": "small", "Resources": {"GPU": 2}},
    ]
    assert [s.name for s in discover_slices(slice_type("gpu-4"), nodes)] == ["big"]


@given(st.integers(1, 4), st.integers(1, 8), st.integers(0, 5))
def test_host_environments_number_processes_slice_by_slice(num_slices, hosts, attempt):
    envs = host_envs("10.0.0.1:1234", [f"s{i}" for i in range(num_slices)], hosts, attempt)
    assert [e.process_id for e in envs] == list(range(num_slices * hosts))
    expected = [(s, h) for s in range(num_slices) for h in range(hosts)]
    assert [(e.slice_id, e.host_id) for e in envs] == expected
    for env in envs:
        assert current_host(env.to_environ()) == env
        assert ("MEGASCALE_NUM_SLICES" in env.to_environ()) == (num_slices > 1)


def test_current_host_outside_a_job_is_an_error():
    with pytest.raises(NotInJobError, match="only available inside a function run by run_on_slices"):
        current_host({})


def test_megascale_variables_name_the_coordinator_host_and_port():
    env = HostEnv("10.0.0.7:8476", 8, 5, 1, 2, "s1", 1, 4, 0).to_environ()
    assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "10.0.0.7"
    assert (env["MEGASCALE_PORT"], env["MEGASCALE_SLICE_ID"], env["JAX_PROCESS_ID"]) == ("8081", "1", "5")


def test_the_jax_coordinator_binds_only_the_address_the_others_dial():
    kwargs = HostEnv("10.0.0.7:8476", 8, 0, 0, 2, "s0", 0, 4, 0).jax_distributed_kwargs()
    assert kwargs == {
        "coordinator_address": "10.0.0.7:8476",
        "coordinator_bind_address": "10.0.0.7:8476",
        "num_processes": 8,
        "process_id": 0,
    }


def _task_error(cause):
    return rex.RayTaskError("fn", "Traceback (most recent call last):\n  boom", cause)


@pytest.mark.parametrize(
    ("error", "node_alive", "cause"),
    [
        (_task_error(ValueError("bad")), True, "failure"),
        (rex.NodeDiedError("node gone"), False, "preemption"),
        (rex.TaskUnschedulableError("node gone"), False, "preemption"),
        (rex.ActorDiedError(), False, "preemption"),
        (rex.WorkerCrashedError(), False, "preemption"),
        (rex.WorkerCrashedError(), True, "failure"),
        (RuntimeError("driver side"), True, "failure"),
    ],
)
def test_lost_hosts_are_preemptions_and_workload_errors_are_failures(error, node_alive, cause):
    assert classify(error, node_alive=node_alive) == cause


def test_the_remote_traceback_survives_the_dual_exception_ray_get_raises():
    dual = _task_error(ValueError("bad")).as_instanceof_cause()
    assert isinstance(dual, ValueError)
    assert remote_traceback(dual).endswith("\n  boom")
    assert remote_traceback(ValueError("local")) is None


def test_short_details_unwrap_the_workload_exception():
    assert short_detail(_task_error(ValueError("bad batch\nmore"))) == "ValueError: bad batch"
    assert short_detail(RuntimeError("x" * 500), limit=20) == "RuntimeError: xxx..."


def test_the_job_error_lists_every_attempt_and_the_traceback():
    attempts = [
        Attempt(0, 2, "preemption", "s0", 1, "NodeDiedError: gone"),
        Attempt(1, 2, "failure", "s1", 0, "E"),
    ]
    error = SliceJobError("gave up", attempts, "Traceback: line 3")
    text = str(error)
    assert "attempt 0 on 2 slice(s): preemption at slice s0 host 1: NodeDiedError: gone" in text
    assert "attempt 1 on 2 slice(s): failure at slice s1 host 0: E" in text
    assert text.endswith("Traceback: line 3")


def test_backoff_doubles_per_retry_up_to_its_cap():
    policy = RetryPolicy(3, 1, backoff_s=2.0, max_backoff_s=10.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 10.0]
    assert (policy.budget("preemption"), policy.budget("failure")) == (3, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_retries_preemption": -1}, "max_retries_preemption must be a non-negative integer"),
        ({"max_retries_failure": 1.5}, "max_retries_failure must be a non-negative integer"),
        ({"backoff_s": 5.0, "max_backoff_s": 1.0}, "need 0 <= backoff_s <= max_backoff_s"),
        ({"num_slices": 0}, "num_slices must be a positive int"),
        ({"num_slices": []}, "num_slices must be a positive int"),
        ({"env": {"JAX_PROCESS_ID": "3"}}, "env may not set 'JAX_PROCESS_ID'"),
        ({"env": {"MEGASCALE_PORT": "1"}}, "env may not set 'MEGASCALE_PORT'"),
        ({"poll_interval_s": -1}, "poll_interval_s must be positive"),
        ({"scale_up_interval_s": 0}, "scale_up_interval_s must be positive"),
        ({"drain_timeout_s": 0}, "drain_timeout_s must be positive"),
        ({"acquire_timeout_s": 0}, "acquire_timeout_s must be positive"),
        ({"slice_type": "v4-12"}, "v4-12 is not a TPU slice size"),
    ],
)
def test_bad_arguments_fail_before_anything_is_claimed(kwargs, message):
    arguments = {
        "slice_type": "cpu-1",
        "num_slices": 1,
        "max_retries_preemption": 0,
        "max_retries_failure": 0,
    } | kwargs
    with pytest.raises(ValueError, match=message):
        run_on_slices(lambda: None, **arguments)


def test_env_values_must_be_strings():
    with pytest.raises(TypeError, match="env must map str to str; 'SEED' maps to int"):
        run_on_slices(
            lambda: None, slice_type="cpu-1", num_slices=1, max_retries_preemption=0, max_retries_failure=0,
            env={"SEED": 1},
        )  # fmt: skip


def test_a_local_cluster_rejects_bad_sizes_before_starting_anything():
    with pytest.raises(ValueError, match="object_store_mb must be at least 75"):
        LocalSliceCluster([("cpu-1", 1)], object_store_mb=10)
    with pytest.raises(ValueError, match="slice count for cpu-1 must be a positive integer, got 0"):
        LocalSliceCluster([("cpu-1", 0)])
    with pytest.raises(ValueError, match="v4-12 is not a TPU slice size"):
        LocalSliceCluster([("v4-12", 1)])


def test_without_a_ray_connection_the_error_says_how_to_connect():
    assert not ray.is_initialized()
    message = r"needs a Ray connection: call ray.init\(address=...\) first"
    with pytest.raises(NotConnectedError, match=message):
        run_on_slices(
            lambda: None, slice_type="cpu-1", num_slices=1, max_retries_preemption=0, max_retries_failure=0
        )


def test_a_retry_policy_is_passed_whole_and_gets_as_far_as_the_connection_check():
    assert not ray.is_initialized()
    with pytest.raises(NotConnectedError):
        run_on_slices(lambda: None, slice_type="cpu-1", num_slices=1, retry=RetryPolicy(2, 0, backoff_s=0.0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retry": RetryPolicy(1, 0), "max_retries_failure": 3}, "got retry= and also max_retries_failure"),
        ({"retry": RetryPolicy(1, 0), "backoff_s": 1.0}, "got retry= and also backoff_s"),
        ({"max_retries_preemption": 1}, "missing max_retries_failure"),
        ({}, "needs retry=RetryPolicy\\(...\\) or both retry budgets"),
        ({"retry": {"max_retries_preemption": 1}}, "retry must be a RetryPolicy, got dict"),
    ],
)
def test_retry_settings_come_either_as_a_policy_or_as_keywords(kwargs, message):
    with pytest.raises(TypeError, match=message):
        run_on_slices(lambda: None, slice_type="cpu-1", num_slices=1, **kwargs)


def test_every_error_raytpu_raises_on_purpose_shares_one_base():
    for error in (SliceJobError, SlicesUnavailableError, NotConnectedError, NotInJobError):
        assert issubclass(error, RaytpuError)
    assert issubclass(RaytpuError, RuntimeError)  # what callers caught before the base existed


def test_a_non_callable_workload_is_a_type_error():
    with pytest.raises(TypeError, match="fn must be callable"):
        run_on_slices(42, slice_type="cpu-1", num_slices=1, max_retries_preemption=0, max_retries_failure=0)


def test_acceptable_counts_are_sorted_and_distinct():
    assert acceptable_slice_counts([4, 1, 4, 2]) == [1, 2, 4]
    assert acceptable_slice_counts(3) == [3]


def test_the_event_log_appends_one_json_object_per_line(tmp_path):
    log = EventLog(tmp_path / "logs" / "events.jsonl", job="j")
    log.emit("slice_acquired", slice="s0")
    log.emit("retry", cause="preemption", delay_s=1.5)
    lines = [json.loads(line) for line in (tmp_path / "logs" / "events.jsonl").read_text().splitlines()]
    assert [(e["job"], e["event"]) for e in lines] == [("j", "slice_acquired"), ("j", "retry")]
    assert lines[1]["delay_s"] == 1.5 and lines == log.events


def test_an_event_log_can_hand_its_lines_to_a_sink_instead_of_a_file(tmp_path, monkeypatch):
    """Where a path cannot name the place (a run directory in a bucket), each line goes to a callable; a
    URL given as the path is refused (it made a local directory named ``gs:``)."""
    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    log = EventLog(job="j", sink=lines.append)
    log.emit("finished", attempt=0)
    assert [json.loads(line) for line in lines] == log.events and log.events[0]["event"] == "finished"
    with pytest.raises(ValueError, match="a file or to a sink, not both"):
        EventLog(tmp_path / "events.jsonl", sink=lines.append)
    for url in ("gs://bucket/run/events.jsonl", "file:///tmp/events.jsonl"):
        with pytest.raises(ValueError, match="a URL; a file path names a local file, and sink= takes"):
            EventLog(url)
    assert not list(tmp_path.iterdir())


def test_the_status_line_rewrites_one_line_and_stays_silent_off_a_terminal():
    screen = io.StringIO()
    line = StatusLine(screen, force=True)
    line.show("attempt 0 running")
    line.show("attempt 1")
    line.close()
    assert screen.getvalue() == "\rattempt 0 running\rattempt 1        \n"
    quiet = io.StringIO()
    StatusLine(quiet).show("anything")
    assert quiet.getvalue() == ""


def test_status_rows_show_live_hosts_and_holders():
    nodes = [_node("a", 0), _node("a", 1), _node("b", 0), _node("b", 1, alive=False)]
    groups = {
        "1": {
            "name": "meltemi-raytpu/train/a",
            "state": "CREATED",
            "bundles_to_node_id": {0: "a-0", 1: "a-1"},
        },
        "2": {"name": "old", "state": "REMOVED", "bundles_to_node_id": {0: "b-0"}},
    }
    rows = slice_rows(nodes, groups)
    assert [(r["slice"], r["hosts_alive"], r["held_by"]) for r in rows] == [
        ("a", [0, 1], "meltemi-raytpu/train/a"),
        ("b", [0], "free"),
    ]
    table = format_rows(rows).splitlines()
    assert table[0].split() == ["SLICE", "TYPE", "HOSTS", "ALIVE", "HELD", "BY"]
    assert table[2].split() == ["b", "v4-16", "0", "free"]
    assert "no slices" in format_rows([])


def test_fake_hosts_look_like_tpu_hosts():
    head = fake_host_args(slice_type("v4-16"), "s0", 0)
    other = fake_host_args(slice_type("v4-16"), "s0", 1)
    assert head["resources"] == {"TPU": 4, "TPU-v4-16-head": 1} and other["resources"] == {"TPU": 4}
    assert other["labels"] == _node("s0", 1)["Labels"]
    assert fake_host_args(slice_type("cpu-2"), "c", 0)["num_cpus"] == 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("v4-16", {"resources": {"TPU": 4}}),
        ("gpu-8", {"num_gpus": 8}),
        ("cpu-2", {"num_cpus": 1}),
    ],
)
def test_host_tasks_hold_their_hosts_chips_inside_the_slice_claim(name, expected):
    kind = slice_type(name)
    claim = SliceClaim(SliceInfo("s0", kind, ()), PlacementGroup(PlacementGroupID.from_random()))
    options = host_task_options(kind, claim, 1, {"env_vars": {"A": "1"}})
    assert {k: options[k] for k in expected} == expected
    assert options["scheduling_strategy"].placement_group_bundle_index == 1
    assert options["runtime_env"] == {"env_vars": {"A": "1"}}
    assert "runtime_env" not in host_task_options(kind, claim, 0, None)


def test_only_worker_zero_bundles_claim_the_head_resource():
    kind = slice_type("v5litepod-16")
    assert host_bundle(kind, 0) == {"TPU": 4.0, "TPU-v5litepod-16-head": 1.0}
    assert host_bundle(kind, 3) == {"TPU": 4.0}
    assert host_bundle(slice_type("gpu-2"), 0) == {"GPU": 2.0}


def test_loopback_only_switches_ray_to_local_addresses_and_restores_everything(monkeypatch):
    import ray._private.ray_constants as ray_constants

    from meltemi.raytpu.local_cluster import loopback_only

    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    monkeypatch.setenv("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "1")
    before = ray_constants.ENABLE_RAY_CLUSTER
    with loopback_only():
        assert ray_constants.ENABLE_RAY_CLUSTER is False
        assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
        assert os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "0"
    assert ray_constants.ENABLE_RAY_CLUSTER == before
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
    assert os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] == "1"


def test_the_status_command_without_a_cluster_says_so(monkeypatch, capsys):
    from meltemi.raytpu.status import main

    def no_cluster(**kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "init", no_cluster)
    assert main(["status", "--address", "127.0.0.1:1"]) == 1
    message = "no Ray cluster at '127.0.0.1:1': Could not find any running Ray instance."
    assert message in capsys.readouterr().err
