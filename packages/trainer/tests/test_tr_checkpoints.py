"""Checkpoints in process: damaged ones skipped by name, mesh changes, zarr-python, retention, phases."""

import json
import re
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore.storage import Location
from meltemi.trainer.checkpoint import digests
from meltemi.trainer.checkpoint.checkpointer import (
    RetentionPolicy,
    SaveSchedule,
    inspect_checkpoint,
    step_dirs,
)
from meltemi.trainer.checkpoint.format import ArrayRecord, Manifest, array_spec, read_array, write_shards
from meltemi.trainer.checkpoint.resume import starting_state
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.phase.initialize import initialize_from_base
from meltemi.trainer.trainer import Trainer


def train(config, run_dir, devices=1, **kwargs):
    return Trainer(
        config, run_dir, devices=jax.devices()[:devices], progress=kwargs.pop("progress", False)
    ).run()


def files(step_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(step_dir)): p.read_bytes() for p in sorted(step_dir.rglob("*")) if p.is_file()}


def checkpointed(make_config, *extra):
    return make_config("--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "2",
                       "--trainer.keep_every", "2", *extra)  # fmt: skip


@pytest.fixture
def good_run(make_config, shared) -> Path:
    """A finished 4-step run (checkpoints at steps 2 and 4, both kept), trained once per test session; tests
    that damage it copy it first."""
    built = shared.get("checkpoints-good-run", lambda root: train(checkpointed(make_config), root / "run"))
    return built / "run"


def flip_a_byte(step_dir: Path) -> str:
    chunk = step_dir / "model.embed_tokens.weight" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    return r"model.embed_tokens.weight does not read back"


def truncate_an_array(step_dir: Path) -> str:
    chunk = step_dir / "model.norm.weight" / "c" / "0"
    chunk.write_bytes(chunk.read_bytes()[:10])
    return r"model.norm.weight does not read back"


def delete_the_mark(step_dir: Path) -> str:
    (step_dir / "COMMITTED").unlink()
    return r"not marked complete"


def remove_the_manifest(step_dir: Path) -> str:
    (step_dir / "manifest.json").unlink()
    return r"manifest.json is missing"


def delete_a_chunk(step_dir: Path) -> str:
    shutil.rmtree(step_dir / "opt_state.1.mu.lm_head.weight" / "c")
    return r"opt_state.1.mu.lm_head.weight is missing 1 of its chunk files"


@pytest.mark.parametrize(
    "damage", [flip_a_byte, truncate_an_array, delete_the_mark, remove_the_manifest, delete_a_chunk]
)
def test_a_damaged_checkpoint_is_skipped_by_name_and_the_one_before_used(
    make_config, good_run, tmp_path, capsys, damage
):
    config = checkpointed(make_config)
    good = files(good_run / "checkpoints" / "step-4")
    shutil.copytree(good_run, tmp_path / "run")
    pattern = damage(tmp_path / "run" / "checkpoints" / "step-4")
    capsys.readouterr()
    summary = train(config, tmp_path / "run", progress=True)
    err = capsys.readouterr().err
    warning = next(line for line in err.splitlines() if line.startswith("skipping checkpoint"))
    assert "step-4" in warning and re.search(pattern, warning), warning
    assert "resuming from" in err and "step-2" in err
    assert summary.steps == 4
    assert files(tmp_path / "run" / "checkpoints" / "step-4") == good


def test_zarr_python_opens_every_array_and_reads_the_saved_values(good_run):
    step_dir = good_run / "checkpoints" / "step-4"
    manifest = Manifest.from_json((step_dir / "manifest.json").read_text())
    group = zarr.open_group(step_dir, mode="r")
    assert sorted(group.array_keys()) == sorted(r.name for r in manifest.arrays)
    for record in manifest.arrays:
        opened = zarr.open_array(step_dir / record.name, mode="r")
        assert opened.shape == record.shape and opened.attrs["dtype"] == record.dtype
        np.testing.assert_array_equal(opened[...], read_array(step_dir, record))
    assert (
        int(group["step"][...]) == 4
        and manifest.step == 4
        and manifest.config["trainer"]["num_train_steps"] == 4
    )
    assert {"jax", "meltemi-trainer"} <= set(manifest.versions)
    assert not any(p.suffix == ".pkl" for p in step_dir.rglob("*"))


@pytest.mark.parametrize(("data", "model"), [(2, 4), (1, 1)])
def test_a_checkpoint_restores_bitwise_onto_another_mesh(make_config, shared, tmp_path, data, model):
    heads = ["--model.num_heads", "8", "--model.num_kv_heads", "4"]

    def on_eight_devices(root):
        train(checkpointed(make_config, *heads, "--trainer.mesh.data", "8"), root / "run", devices=8)

    trained = shared.get("checkpoints-eight-devices", on_eight_devices)  # trained once per session
    shutil.copytree(trained / "run", tmp_path / "run")
    step_dir = tmp_path / "run" / "checkpoints" / "step-4"
    manifest = inspect_checkpoint(step_dir)
    saved = {r.name: read_array(step_dir, r) for r in manifest.arrays}
    mesh = ["--trainer.mesh.data", str(data), "--trainer.mesh.model", str(model)]
    config = checkpointed(make_config, *heads, *mesh,
                          "--trainer.num_train_steps", "6", "--optimizer.extension", "decay")  # fmt: skip
    trainer = Trainer(config, tmp_path / "run", devices=jax.devices()[: data * model], progress=False)
    start = starting_state(trainer, warn=pytest.fail)
    assert start.resumed_from == Location.parse(step_dir)
    from meltemi.trainer.checkpoint.checkpointer import _named_leaves, _raw

    for name, leaf in _named_leaves(start.state):
        array = _raw(leaf)
        assert array.sharding.mesh.shape == {"replica": 1, "data": data, "model": model}
        assert np.asarray(array).tobytes() == saved[name].tobytes(), name
    summary = trainer.run()
    assert summary.steps == 6 and np.isfinite(summary.last_eval["eval/loss"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_an_arrays_metadata_is_the_one_tensorstore_writes_and_its_shards_read_back(tmp_path, dtype):
    import tensorstore as ts

    from meltemi.datastore.storage import Directory, storage_context

    record = ArrayRecord("opt/mu.w", dtype, (4, 6), (2, 6), ("layers", "embed"))
    ours, theirs = Directory(tmp_path / "ours"), Directory(tmp_path / "theirs")
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    shards = [((slice(0, 2), slice(0, 6)), values[:2]), ((slice(2, 4), slice(0, 6)), values[2:])]
    for future in write_shards(ours, record, shards):
        future.result()
    ts.open(array_spec(theirs, record, create=True), context=storage_context()).result()
    assert ours.read_bytes("opt/mu.w/zarr.json") == theirs.read_bytes("opt/mu.w/zarr.json")
    assert read_array(ours, record).tolist() == values.astype(jax.numpy.dtype(dtype)).tolist()


def test_retention_keeps_the_permanent_ones_and_the_newest_and_every_save_shares_one_trace(
    make_config, run_dir, monkeypatch
):
    """Seven saves, the last one after the loop: all of them run the fingerprint programs the first one
    traced, one per array shape (the mesh is part of a trace's context, so a save outside the loop's mesh
    traced and compiled them again). Every array is summed on the devices here, as a large model's are
    (this model's are small enough for the host: ``digests.on_host``)."""
    traces, sums = [], digests.array_sums.__wrapped__

    def counted(x):
        traces.append((x.shape, x.dtype))
        return sums(x)

    monkeypatch.setattr(digests, "array_sums", jax.jit(counted))
    monkeypatch.setattr(digests, "HOST_ELEMENTS", 0)
    config = make_config(
        "--trainer.num_train_steps", "7", "--trainer.checkpoint_every", "1", "--trainer.keep_every", "3"
    )
    train(config, run_dir)
    assert [s for s, _ in step_dirs(run_dir / "checkpoints")] == [7, 6, 3]
    assert all((path / "COMMITTED").is_file() for path in (run_dir / "checkpoints").iterdir())
    assert len(traces) == len(set(traces)) > 3, traces


def test_by_default_the_two_newest_checkpoints_stay_so_a_damaged_newest_one_costs_only_its_steps(
    make_config, tmp_path, capsys
):
    config = make_config("--trainer.num_train_steps", "6", "--trainer.checkpoint_every", "2")
    run = tmp_path / "run"
    train(config, run)
    assert [s for s, _ in step_dirs(run / "checkpoints")] == [6, 4]
    flip_a_byte(run / "checkpoints" / "step-6")  # bit rot after the run
    capsys.readouterr()
    summary = train(config, run, progress=True)
    err = capsys.readouterr().err
    assert summary.start_step == 4 and summary.steps == 6
    assert (
        f"resuming from {run / 'checkpoints' / 'step-4'}, the newest checkpoint that reads back whole "
        "(step-6 does not: see above)"
    ) in err


@given(
    keep_every=st.one_of(st.none(), st.integers(1, 50)),
    keep_last=st.integers(1, 4),
    steps=st.lists(st.integers(1, 500), min_size=1, unique=True),
)
def test_retention_policy_keeps_exactly_the_multiples_and_the_newest(keep_every, keep_last, steps):
    kept = RetentionPolicy(keep_every, keep_last).keeps(steps)
    newest = sorted(steps, reverse=True)[:keep_last]
    assert kept == sorted(s for s in steps if s in newest or (keep_every and s % keep_every == 0))


@given(every=st.one_of(st.none(), st.integers(1, 20)), minutes=st.one_of(st.none(), st.floats(0.1, 10)),
       step=st.integers(1, 1000), elapsed=st.floats(0, 20))  # fmt: skip
def test_a_save_is_due_on_the_step_interval_or_after_the_minutes(every, minutes, step, elapsed):
    due = SaveSchedule(every, minutes).due(step, elapsed)
    assert due == ((every is not None and step % every == 0) or (minutes is not None and elapsed >= minutes))


def test_a_config_that_breaks_resume_names_the_field_and_one_that_does_not_resumes(
    make_config, good_run, run_dir
):
    shutil.copytree(good_run, run_dir)  # a run of checkpointed(make_config), finished at step 4
    with pytest.raises(
        ConfigError, match=r"^model.hidden_dim: the checkpoint has 32, the config 64: the run's"
    ):
        train(checkpointed(make_config, "--model.hidden_dim", "64"), run_dir)
    longer = train(
        checkpointed(
            make_config,
            "--trainer.num_train_steps",
            "6",
            "--trainer.log_every",
            "1",
            "--optimizer.extension",
            "tail",
        ),
        run_dir,
    )
    assert longer.steps == 6 and longer.tokens == 6 * 16 * 32 and longer.session_tokens == 2 * 16 * 32


def test_a_new_phase_begins_from_another_runs_parameters(make_config, good_run, tmp_path):
    source = good_run / "checkpoints" / "step-4"  # phase 1: a run of checkpointed(make_config)
    config = make_config("--trainer.num_train_steps", "2", "--trainer.initialize_from",
                         f"{{path: {good_run}, parameters_only: true, reset_step: true}}",
                         "--optimizer.weight_decay", "0.0")  # fmt: skip
    trainer = Trainer(config, tmp_path / "phase2", devices=jax.devices()[:1], progress=False)
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert start.initialized_from == str(source) and int(start.state.step) == 0
    embed = read_array(
        source, next(r for r in inspect_checkpoint(source).arrays if r.name == "model.embed_tokens.weight")
    )
    assert np.asarray(start.state.model.embed_tokens.weight.array).tobytes() == embed.tobytes()
    mu = start.state.opt_state[1].mu.embed_tokens.weight.array
    assert not np.asarray(mu).any()  # a fresh optimizer
    trainer.run()
    manifest = json.loads((tmp_path / "phase2" / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert manifest["initialized_from"] == str(source)


def test_initialize_from_a_directory_without_checkpoints_is_named(make_config, tmp_path):
    (tmp_path / "empty").mkdir()
    config = make_config("--trainer.initialize_from", f"{{path: {tmp_path / 'empty'}}}")
    with pytest.raises(
        CheckpointError,
        match=r"^trainer.initialize_from: .*empty is neither a run .*, a step-N checkpoint nor a "
        r"Hugging Face directory \(no config.json\)",
    ):
        train(config, tmp_path / "run")
    absent = make_config("--trainer.initialize_from", str(tmp_path / "absent"))
    with pytest.raises(CheckpointError, match=r"absent: no such run or directory \(train the base first"):
        train(absent, tmp_path / "run")
    (tmp_path / "empty" / "model.safetensors").write_bytes(b"weights")
    weights = make_config("--trainer.initialize_from", str(tmp_path / "empty" / "model.safetensors"))
    with pytest.raises(
        CheckpointError, match=rf"model.safetensors is a file, .*: give the directory, {tmp_path}/empty$"
    ):
        train(weights, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_rerunning_a_finished_run_reports_it_without_compiling_or_training(make_config, good_run, tmp_path):
    shutil.copytree(good_run, tmp_path / "run")
    before = files(tmp_path / "run" / "checkpoints" / "step-4")
    trainer = Trainer(checkpointed(make_config), tmp_path / "run", devices=jax.devices()[:1], progress=False)
    summary = trainer.run()
    assert summary.already_trained and summary.steps == 4 and summary.session_tokens == 0
    assert summary.last_checkpoint == Location.parse(tmp_path / "run" / "checkpoints" / "step-4")
    assert trainer.compile_report is None  # the train step was never compiled
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval/loss" in r]
    assert summary.first_eval["eval/loss"] == evals[0]["eval/loss"]
    assert summary.last_eval["eval/loss"] == evals[-1]["eval/loss"] < evals[0]["eval/loss"]
    assert files(tmp_path / "run" / "checkpoints" / "step-4") == before


def test_a_run_resumed_on_other_data_says_so_and_on_the_same_data_does_not(
    make_config, good_run, tmp_path, capsys
):
    """The checkpoint records the hash of the batch of its step; a resumption reading another batch there
    (its data changed since: another held-out fraction moves every training row) warns, once."""
    for name, extra, warned in (("same", (), False), ("other", ("--data.eval_fraction", "0.2"), True)):
        shutil.copytree(good_run, tmp_path / name)
        shutil.rmtree(tmp_path / name / "checkpoints" / "step-4")
        capsys.readouterr()
        summary = train(checkpointed(make_config, *extra), tmp_path / name, progress=True)
        err = capsys.readouterr().err
        assert "resuming from" in err and summary.steps == 4
        warnings = [line for line in err.splitlines() if line.startswith("warning: the batch of step 2")]
        assert len(warnings) == int(warned), err
        if warned:
            assert f"is not the one {tmp_path / name / 'checkpoints' / 'step-2'} recorded" in warnings[0]
