"""A launch on slices checks what every host would check before any cluster starts, and a multi-process
CPU job's output is free of gloo's connection lines."""

import subprocess
import sys
import textwrap

import pytest

from meltemi.trainer.cli import main
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import ConfigError, MeshError
from meltemi.trainer.launch import SliceLaunch, check_before_launch
from meltemi.trainer.step.mesh import check_device_count


def config_with(**trainer) -> RunConfig:
    return RunConfig.model_validate({"trainer": trainer})


def test_the_device_counts_of_a_launch_cover_every_number_of_slices_it_may_run_on():
    assert SliceLaunch("cpu-1", 2).device_counts() == {2: 8}
    assert SliceLaunch("cpu-2", 3, min_slices=1, devices_per_host=2).device_counts() == {1: 4, 2: 8, 3: 12}
    assert SliceLaunch("v4-16", 2).device_counts() == {2: 16}  # 2 hosts of 4 chips each, per slice


def test_a_batch_that_does_not_split_over_some_number_of_slices_is_refused_naming_it():
    check_before_launch(config_with(global_batch_size=16), "runs/x", SliceLaunch("cpu-1", 2))
    with pytest.raises(MeshError) as caught:
        check_before_launch(
            config_with(global_batch_size=16), "runs/x", SliceLaunch("cpu-1", 3, min_slices=2)
        )  # 8 devices on two slices, 12 on three
    assert str(caught.value).startswith(
        "--launch ray on 3 slices of cpu-1 (12 devices): trainer.global_batch_size 16 does not split over"
    )


def test_a_tracker_that_writes_local_files_is_refused_for_a_bucket_run_before_the_launch():
    config = RunConfig.model_validate({"trainer": {"trackers": {"tensorboard": True}}})
    with pytest.raises(ConfigError, match=r"^trainer.trackers.tensorboard: writes local files"):
        check_before_launch(config, "s3://meltemi-runs/run", SliceLaunch("cpu-1", 1))
    check_before_launch(config, "runs/x", SliceLaunch("cpu-1", 1))


def test_the_shape_check_without_devices_is_the_check_a_mesh_of_devices_makes():
    assert check_device_count(config_with(global_batch_size=8), 8) == {"replica": 1, "data": 8, "model": 1}
    for count in (3, 16):
        with pytest.raises(MeshError, match=f"over the {count} data-parallel devices"):
            check_device_count(config_with(global_batch_size=8), count)


def test_a_launch_the_devices_refuse_starts_no_cluster(corpus, monkeypatch, tmp_path, capsys):
    """The issue's case: a batch of 4 on two slices of 4 devices failed only after the cluster had started
    (22 s) and left a Ray worker behind. Now it is one line and nothing starts."""
    import meltemi.raytpu

    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(meltemi.raytpu, "LocalSliceCluster", no_cluster)
    monkeypatch.chdir(tmp_path)
    sources = f"{{py: {{store: {corpus['store']}}}}}"
    status = main(["--launch", "ray", "--slices", "2", "--trainer.global_batch_size", "4",
                   "--model.vocab_size", "384", "--data.tokenizer", corpus["tokenizer"],
                   "--data.sources", sources, "--run-dir", str(tmp_path / "run")])  # fmt: skip
    said = capsys.readouterr().err.strip().splitlines()
    assert status == 1 and said[-1].startswith(
        "error: --launch ray on 2 slices of cpu-1 (8 devices): trainer.global_batch_size 4 does not split"
    )
    assert not (tmp_path / "run").exists()


def test_gloos_connection_lines_are_dropped_and_every_other_line_kept_in_order():
    script = textwrap.dedent(
        """
        import os
        from meltemi.trainer.step.gloo_lines import drop_gloo_lines
        print("before", flush=True)
        drop_gloo_lines()
        os.write(1, b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks\\n")
        print("step 1", flush=True)
        os.write(1, b"[Gloo] Rank [Gloo] Rank 4 is connected to 7 peer ranks. Expected number")
        os.write(1, b" of connected peer ranks is : 7\\n5 is connected to 7 peer ranks. Expected number of ")
        os.write(1, b"connected peer ranks is : 7\\nstep 2\\n")
        print("the summary, last", end="")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "before\nstep 1\nstep 2\nthe summary, last"
