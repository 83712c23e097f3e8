"""Training on slices through Ray, on a local cluster of fake CPU slices (one host each, 2 devices per host):
the same batches and the same end as one process; a killed host of a run in a bucket (s3:// and gs://)
restarts the job, which resumes to the same bits as the run that was not interrupted; with ``min_slices`` a
lost slice leaves the run on the rest, with the same data order, and a slice that comes back grows it again
at a checkpoint."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from meltemi.datastore.storage import Directory
from meltemi.datastore.testing import environ_with
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.step.fake_devices import fake_devices_environ

# One Ray cluster at a time on this machine; these multi-process runs are the longest: they start first.
pytestmark = [pytest.mark.xdist_group("raytpu-cluster"), pytest.mark.slow]

STEPS = 16  # long enough that a host killed after the first checkpoint dies mid-run


@pytest.fixture(scope="module")
def config(small_config):
    return small_config.model_copy(
        update={"trainer": small_config.trainer.model_copy(update={"num_train_steps": STEPS})}
    )


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory) -> Path:
    """The same run in one process with the same global mesh (4 devices)."""
    root = tmp_path_factory.mktemp("reference")
    (root / "config.yaml").write_text(dump_config(config))
    env = fake_devices_environ(4)
    command = [
        sys.executable,
        "-m",
        "meltemi.trainer",
        "--config",
        str(root / "config.yaml"),
        "--run-dir",
        str(root / "run"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return root / "run"


SLICES = 4  # every test below finds two free; the killed-host tests each lose one for good


@pytest.fixture(scope="module")
def cluster(s3_server, gcs_server):
    """Four fake slices whose hosts reach both bucket emulators, as a cloud's hosts reach their buckets
    (each host's environment: the raylets inherit it)."""
    from meltemi.raytpu import LocalSliceCluster

    with pytest.MonkeyPatch.context() as env:
        for name, value in environ_with(s3_server, gcs_server).items():
            env.setenv(name, value)
        env.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
        with LocalSliceCluster([("cpu-1", SLICES)]) as running:
            yield running


def final_arrays(run_dir: Path | str) -> dict[str, np.ndarray]:
    step_dir = f"{run_dir}/checkpoints/step-{STEPS}"
    return {r.name: read_array(step_dir, r) for r in inspect_checkpoint(step_dir).arrays}


def assert_same_run(run_dir: Path, reference: Path) -> None:
    hashes = {json.loads(line)["step"]: line for line in (run_dir / "batches.jsonl").read_text().splitlines()}
    expected = {
        json.loads(line)["step"]: line for line in (reference / "batches.jsonl").read_text().splitlines()
    }
    assert hashes == expected  # every step's batch, bitwise (steps redone after a restart log the same hash)
    theirs = final_arrays(reference)
    # Gloo's all-reduce between processes may sum in another order than XLA's in one process: float32
    # rounding, which the optimizer's bounded steps keep small at this scale over these few steps.
    for name, value in final_arrays(run_dir).items():
        np.testing.assert_allclose(value, theirs[name], rtol=1e-4, atol=1e-6, err_msg=name)


def launch(config, run_dir, slices, min_slices=None, **options):
    """The launch ``--launch ray`` makes: its events into the run directory, local or in a bucket."""
    from meltemi.trainer.launch import SliceLaunch, run_events, train_on_slices

    plan = SliceLaunch(
        "cpu-1", slices, min_slices=min_slices, devices_per_host=2, acquire_timeout_s=120, **options
    )
    return train_on_slices(config, run_dir, plan, event_log=run_events(str(run_dir)))


def read_events(run_dir: Path | str) -> list[dict]:
    return [json.loads(line) for line in Directory(run_dir).read_text("events.jsonl").splitlines()]


@pytest.fixture(scope="module")
def uninterrupted(cluster, config, tmp_path_factory) -> tuple[Path, list]:
    """The run on two slices with nothing in its way (plotting its loss, as a user's run does): its run
    directory and each host's result."""
    run_dir = tmp_path_factory.mktemp("uninterrupted") / "run"
    plotted = config.model_copy(update={"trainer": config.trainer.model_copy(update={"plots": True})})
    return run_dir, launch(plotted, run_dir, slices=2)


def test_two_slices_train_like_one_process(uninterrupted, reference):
    run_dir, results = uninterrupted
    assert [(r.process_index, r.process_count, r.steps) for r in results] == [(0, 2, STEPS), (1, 2, STEPS)]
    assert_same_run(run_dir, reference)


def test_the_launchers_summary_is_the_one_a_run_on_one_machine_prints(
    uninterrupted, reference, config, capsys
):
    """A launch prints the first host's summary: held-out loss and paths, as a run on one machine does."""
    from meltemi.trainer.cli import report

    run_dir, results = uninterrupted
    assert report(results[0].summary, config.model_copy(update={"trainer": config.trainer.model_copy(
        update={"sample_prompt": None})}), str(run_dir)) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"steps: {STEPS}   tokens: ")
    assert (
        lines[1].startswith("held-out loss: ")
        and "at step 0 -> " in lines[1]
        and f"at step {STEPS}" in lines[1]
    )
    assert lines[2:] == [f"metrics: {run_dir / 'metrics.jsonl'}", f"loss curve: {run_dir / 'loss.png'}",
                         f"last checkpoint: {run_dir / 'checkpoints' / f'step-{STEPS}'}"]  # fmt: skip


def test_a_slice_that_comes_back_scales_the_run_up_at_a_checkpoint_without_redoing_a_step(
    cluster, config, reference, tmp_path
):
    from meltemi.raytpu import slice_type
    from meltemi.raytpu.claims import claim_slices, release

    held = claim_slices(slice_type("cpu-1"), [SLICES - 1], job_name="someone-else", wait_s=30)
    assert len(held) == SLICES - 1, "the cluster's slices should all be alive and free here"
    run_dir = tmp_path / "run"

    def give_one_back_after_the_first_checkpoint():
        deadline = time.monotonic() + 300
        while not (run_dir / "checkpoints" / "step-2" / "COMMITTED").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        release(held[:1])

    helper = threading.Thread(target=give_one_back_after_the_first_checkpoint, daemon=True)
    helper.start()
    try:
        results = launch(config, run_dir, slices=2, min_slices=1, scale_up_interval_s=0.5)
    finally:
        helper.join()
        release(held[1:])
    assert [(r.process_count, r.steps, r.stopped_by) for r in results] == [(2, STEPS, None)] * 2
    events = read_events(run_dir)
    assert [e["event"] for e in events if e["event"] != "slice_acquired"] == ["drained", "scaled", "finished"]
    assert events[[e["event"] for e in events].index("drained")]["killed"] == 0  # stopped at a checkpoint
    steps = [json.loads(line)["step"] for line in (run_dir / "batches.jsonl").read_text().splitlines()]
    assert len(steps) == len(set(steps)) == STEPS  # no step was lost and trained again after the restart
    assert_same_run(run_dir, reference)


def test_a_failing_workload_spends_its_failure_budget_then_ends_with_its_own_error(cluster, config, tmp_path):
    from meltemi.trainer.config import SourceConfig
    from meltemi.trainer.errors import DataError

    sources = {"py": SourceConfig(store=str(tmp_path / "no-such-store"))}
    broken = config.model_copy(update={"data": config.data.model_copy(update={"sources": sources})})
    with pytest.raises(DataError, match="no-such-store") as raised:
        launch(broken, tmp_path / "run", slices=1, max_retries_failure=1)
    assert "failure retries exhausted (1 allowed)" in str(raised.value.__cause__)
    events = [e["event"] for e in read_events(tmp_path / "run")]
    assert events.count("host_failed") == 2 and events.count("retry") == 1 and events[-1] == "gave_up"


def kill_after_first_checkpoint(cluster, run_dir: Path | str) -> threading.Thread:
    """Once the run has committed a checkpoint, kill the host of a slice the job holds (not the head's)."""
    run = Directory(run_dir)

    def watch():
        deadline = time.monotonic() + 300
        while not run.exists("checkpoints/step-2/COMMITTED") and time.monotonic() < deadline:
            time.sleep(0.05)
        events = read_events(run_dir)
        held = [e["slice"] for e in events if e["event"] == "slice_acquired" and e["slice"] != "cpu-1-0"]
        cluster.kill_host(cluster.node_ids(held[-1])[0])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


@pytest.mark.parametrize("scheme", ["s3", "gs"])
def test_a_killed_host_of_a_run_in_a_bucket_restarts_the_job_which_resumes_to_the_same_end(
    cluster, config, reference, uninterrupted, s3_server, gcs_server, scheme
):
    """``--launch ray --run-dir s3://…`` (and ``gs://…``): every host reads and writes the run in the bucket;
    a host killed after the first checkpoint restarts the job, which resumes from the bucket to the bits of
    the local run that was not interrupted, its events kept beside the run."""
    server = s3_server if scheme == "s3" else gcs_server
    run = f"{scheme}://{server.make_bucket()}/runs/tiny"
    watcher = kill_after_first_checkpoint(cluster, run)
    results = launch(config, run, slices=2)
    watcher.join()
    assert results[0].steps == STEPS
    hashes = Directory(run).read_text("batches.jsonl").splitlines()
    assert set(hashes) == set((reference / "batches.jsonl").read_text().splitlines())  # redone steps: same
    # Against the same two-process run uninterrupted, the resumed run is equal to the bit.
    theirs = final_arrays(uninterrupted[0])
    for name, value in final_arrays(run).items():
        np.testing.assert_array_equal(value, theirs[name], err_msg=name)
    events = [e["event"] for e in read_events(run)]
    assert "slice_lost" in events and "retry" in events and events[-1] == "finished"


def test_with_min_slices_a_lost_slice_leaves_a_run_in_a_bucket_on_the_rest(
    cluster, config, reference, s3_server
):
    others = [name for name in cluster.slice_names() if name != "cpu-1-0" and cluster.node_ids(name)]
    for name in others[1:]:  # two live slices, so that losing one leaves exactly one
        cluster.kill_host(cluster.node_ids(name)[0])
    run = f"s3://{s3_server.make_bucket()}/runs/tiny"
    watcher = kill_after_first_checkpoint(cluster, run)
    results = launch(config, run, slices=2, min_slices=1)
    watcher.join()
    assert results[0].process_count == 1 and results[0].steps == STEPS
    hashes = Directory(run).read_text("batches.jsonl").splitlines()
    expected = set((reference / "batches.jsonl").read_text().splitlines())
    assert set(hashes) == expected  # the same data order on fewer processes
    events = [e["event"] for e in read_events(run)]
    assert "slice_lost" in events and events[-1] == "finished"


def test_more_slices_than_the_cluster_has_is_an_error_saying_what_there_is(cluster, config, tmp_path):
    from meltemi.raytpu import SlicesUnavailableError
    from meltemi.trainer.launch import SliceLaunch, train_on_slices

    with pytest.raises(SlicesUnavailableError, match=r"cpu-1") as error:
        train_on_slices(config, tmp_path / "run", SliceLaunch("cpu-1", 5, acquire_timeout_s=5))
    assert "5" in str(error.value)
