"""The moving average of the weights (optimizer.ema): its update, skipped steps, checkpoints and resumption,
evaluation, the apps' --weights and a new phase's base."""

import json
import shutil
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.checkpoint.resume import starting_state
from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.phase.initialize import initialize_from_base
from meltemi.trainer.step.train_step import init_state, make_train_step
from meltemi.trainer.trainer import Trainer

BETA = 0.75  # far from 1, so that a few steps move the average visibly apart from the weights


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def averaged(make_config, *extra, beta=BETA, start=0):
    return make_config("--optimizer.ema", f"{{beta: {beta}, start_step: {start}}}", *extra)


def checkpointed(make_config, *extra, ema=True):
    """Six steps, a checkpoint every two (all kept), with an average of the weights when ``ema``."""
    words = ("--trainer.num_train_steps", "6", "--trainer.checkpoint_every", "2", "--trainer.keep_every", "2")
    return averaged(make_config, *words, *extra) if ema else make_config(*words, *extra)


def train(config, run_dir, devices=1):
    return Trainer(config, run_dir, devices=jax.devices()[:devices], progress=False).run()


def initial_state(config):
    """The step-0 state, jitted as the trainer makes it (eagerly, each op of the init compiled on its own)."""
    return jax.jit(partial(init_state, config))(adapters.jax_key(0, "init"))


def arrays(step_dir: Path, prefix: str) -> dict[str, np.ndarray]:
    manifest = inspect_checkpoint(step_dir)
    return {r.name: read_array(step_dir, r) for r in manifest.arrays if r.name.startswith(prefix)}


@pytest.fixture
def ema_run(make_config, shared) -> Path:
    """A 6-step run keeping an average (checkpoints at steps 2, 4 and 6, all kept), once per session."""
    built = shared.get("ema-run", lambda root: train(checkpointed(make_config), root / "run"))
    return built / "run"


@pytest.fixture
def plain_run(make_config, shared) -> Path:
    """The same run without an average, once per session."""
    plain = checkpointed(make_config, ema=False)
    built = shared.get("ema-plain-run", lambda root: train(plain, root / "run"))
    return built / "run"


def test_the_average_is_the_numpy_reference_after_every_step(make_config, run_dir):
    start = 2
    config = averaged(make_config, start=start)
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    state = initial_state(config)
    assert all((a == b).all() for a, b in zip(leaves(state.ema), leaves(state.model), strict=True))
    step = jax.jit(make_train_step(config))
    reference = leaves(state.model)
    for t in range(5):
        batch = adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(t)))
        state, metrics = step(state, batch)
        assert bool(metrics.applied)
        weights = leaves(state.model)
        if t < start:  # until the average starts, it is the weights of the step
            reference = [w.copy() for w in weights]
        else:
            beta = np.float32(BETA)
            reference = [
                beta * r + (np.float32(1) - beta) * w for r, w in zip(reference, weights, strict=True)
            ]
        for got, want in zip(leaves(state.ema), reference, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)  # XLA may fuse it into an FMA
    apart = max(float(np.abs(e - w).max()) for e, w in zip(leaves(state.ema), weights, strict=True))
    assert apart > 1e-4  # the average lags the weights: an average equal to them would fail above


def test_a_skipped_step_leaves_the_average_as_it_was(make_config, run_dir):
    config = averaged(make_config)
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    batch = adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(0)))
    step = jax.jit(make_train_step(config))
    state, _ = step(initial_state(config), batch)  # the average moved once
    before = leaves(state.ema)
    weight = state.model.embed_tokens.weight
    poisoned = jax.tree_util.tree_map(
        lambda x: weight.array.at[:].set(jnp.nan) if x is weight.array else x,
        state,
        is_leaf=lambda x: x is weight.array,
    )
    after, metrics = step(poisoned, batch)
    assert not bool(metrics.applied) and int(after.skipped_steps) == 1 and int(after.step) == 2
    for got, want in zip(leaves(after.ema), before, strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_run_keeps_the_average_in_its_checkpoints_and_evaluates_both(ema_run):
    step6 = ema_run / "checkpoints" / "step-6"
    model, ema = arrays(step6, "model."), arrays(step6, "ema.")
    assert len(ema) == len(model) >= 12
    assert {name.removeprefix("ema.") for name in ema} == {name.removeprefix("model.") for name in model}
    assert any(not np.array_equal(ema[f"ema.{n[6:]}"], w) for n, w in model.items())
    records = [json.loads(line) for line in (ema_run / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r for r in records if "eval/loss" in r}
    assert "eval/ema/loss" not in evals[0]  # at step 0 the average is the weights: evaluated once
    assert {"eval/ema/loss", "eval/ema/bpb", "eval/ema/py/loss", "eval/ema/py/bpb"} <= set(evals[6])
    assert evals[6]["eval/ema/loss"] != evals[6]["eval/loss"]


def test_a_resumed_run_ends_bitwise_equal_to_the_uninterrupted_one_average_included(
    make_config, ema_run, run_dir
):
    shutil.copytree(ema_run, run_dir)
    for step in (4, 6):
        shutil.rmtree(run_dir / "checkpoints" / f"step-{step}")
    summary = train(checkpointed(make_config), run_dir)
    assert summary.resumed_from is not None and summary.resumed_from.name == "step-2"
    for prefix in ("model.", "opt_state.", "ema."):
        resumed, whole = (
            arrays(run_dir / "checkpoints" / "step-6", prefix),
            arrays(ema_run / "checkpoints" / "step-6", prefix),
        )
        assert resumed.keys() == whole.keys() and resumed
        for name, values in whole.items():
            assert resumed[name].tobytes() == values.tobytes(), name
    digest = [inspect_checkpoint(r / "checkpoints" / "step-6").state_digest for r in (run_dir, ema_run)]
    assert digest[0] == digest[1]
    assert "; EMA weights: " in summary.held_out_line()
    assert summary.last_eval["eval/ema/loss"] != summary.last_eval["eval/loss"]


def test_turning_the_average_on_at_a_resumption_starts_it_from_the_restored_weights(
    make_config, plain_run, run_dir
):
    shutil.copytree(plain_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step-6")
    trainer = Trainer(checkpointed(make_config), run_dir, devices=jax.devices()[:1], progress=False)
    notes = []
    start = starting_state(trainer, warn=notes.append)
    assert start.resumed_from.name == "step-4"
    assert notes == [
        f"{run_dir / 'checkpoints' / 'step-4'} holds no average of the weights: optimizer.ema's starts from "
        "its weights at step 4"
    ]
    for ema, weight in zip(leaves(start.state.ema), leaves(start.state.model), strict=True):
        assert ema.tobytes() == weight.tobytes()
    assert train(checkpointed(make_config), run_dir).steps == 6
    assert arrays(run_dir / "checkpoints" / "step-6", "ema.")


def test_turning_it_off_goes_on_without_it_and_says_so(make_config, ema_run, run_dir):
    shutil.copytree(ema_run, run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step-6")
    trainer = Trainer(
        checkpointed(make_config, ema=False), run_dir, devices=jax.devices()[:1], progress=False
    )
    notes = []
    start = starting_state(trainer, warn=notes.append)
    assert start.state.ema is None and len(notes) == 1
    assert notes[0].startswith(
        f"warning: {run_dir / 'checkpoints' / 'step-4'} holds an average of the weights"
    )
    assert "goes on without it" in notes[0]


def test_a_trained_model_is_the_average_unless_raw_is_asked_for(ema_run, plain_run):
    step6 = ema_run / "checkpoints" / "step-6"
    default, raw = load_model(ema_run), load_model(ema_run, weights="raw")
    assert default.weights == "ema" and raw.weights == "raw"
    embed = default.model.embed_tokens.weight.array
    assert np.asarray(embed).tobytes() == arrays(step6, "ema.")["ema.embed_tokens.weight"].tobytes()
    raw_embed = raw.model.embed_tokens.weight.array
    assert np.asarray(raw_embed).tobytes() == arrays(step6, "model.")["model.embed_tokens.weight"].tobytes()
    assert load_model(plain_run).weights == "raw"
    with pytest.raises(
        CheckpointError,
        match=rf"^{plain_run} has no EMA weights \(its checkpoint step-6 kept none: optimizer.ema was off\); "
        r"--weights raw reads its weights as trained$",
    ):
        load_model(plain_run, weights="ema")


def test_the_apps_share_the_weights_flag_and_say_when_a_run_has_no_average(plain_run, capsys):
    import argparse

    from meltemi.trainer.generate.flags import PRETRAINED, add_checkpoint_flag, parse_app_args

    parser = argparse.ArgumentParser(prog="sample.py")
    add_checkpoint_flag(parser, PRETRAINED, dry_run=True)
    args, _ = parse_app_args(parser, ["--checkpoint", str(plain_run), "--weights", "raw"])
    assert args.weights == "raw"
    with pytest.raises(SystemExit):
        parse_app_args(parser, ["--checkpoint", str(plain_run), "--weights", "average"])
    with pytest.raises(SystemExit):
        parse_app_args(parser, ["--dry-run", "--config", "c.yaml", "--weights", "ema"])
    assert "--weights: not with --dry-run" in capsys.readouterr().err

    from importlib import util

    spec = util.spec_from_file_location("export_app", Path(__file__).parents[3] / "apps" / "export_hf.py")
    app = util.module_from_spec(spec)
    spec.loader.exec_module(app)
    out = plain_run.parent / "never-written"
    assert app.main(["--checkpoint", str(plain_run), "--weights", "ema", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {plain_run} has no EMA weights (its checkpoint step-6 kept none: optimizer.ema was off); "
        "--weights raw reads its weights as trained"
    ]
    assert not out.exists()


@pytest.mark.parametrize("weights", ["ema", "raw"])
def test_a_new_phase_starts_from_the_bases_average_unless_raw(make_config, ema_run, tmp_path, weights):
    source = ema_run / "checkpoints" / "step-6"
    config = averaged(
        make_config,
        "--trainer.num_train_steps", "2",
        "--trainer.initialize_from", f"{{path: {ema_run}, weights: {weights}}}",
    )  # fmt: skip
    trainer = Trainer(config, tmp_path / "phase2", devices=jax.devices()[:1], progress=False)
    notes = []
    start = starting_state(trainer, warn=notes.append, initialize=initialize_from_base)
    prefix = "ema." if weights == "ema" else "model."
    stored = arrays(source, prefix)[f"{prefix}embed_tokens.weight"]
    assert np.asarray(start.state.model.embed_tokens.weight.array).tobytes() == stored.tobytes()
    assert np.asarray(start.state.ema.embed_tokens.weight.array).tobytes() == stored.tobytes()
    assert bool(notes) == (weights == "ema")  # the average taken is said


def test_fine_tuning_takes_the_weights_of_its_base_by_flag_and_training_names_the_field():
    from meltemi.trainer.command import parse_command

    command = parse_command(["--base", "runs/tiny", "--weights", "raw"], fine_tuning=True)
    assert command.overrides == ("--trainer.initialize_from.path", "runs/tiny",
                                 "--trainer.initialize_from.weights", "raw")  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--weights average: ema \(the average"):
        parse_command(["--weights", "average"], fine_tuning=True)
    with pytest.raises(
        ConfigError, match=r"^--weights: a flag of apps/sft.py; here, set --trainer.initialize_"
    ):
        parse_command(["--weights", "raw"])


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [
        ("--data.sources", '{"ema": {"store": "s"}}', "data.sources"),
        ("--data.eval_sets", '{"ema": {"store": "s"}}', "data.eval_sets"),
        ("--data.eval_sets", '{"held": {"store": "s", "tags": ["ema"]}}', "a tag of data.eval_sets"),
    ],
)
def test_no_source_eval_set_or_tag_may_take_the_averages_name(make_config, field, value, what):
    """eval/ema/loss is the average's: a source, eval set or tag called ema would be read as it."""
    with pytest.raises(ConfigError, match=f"{what}: ema names the average of the weights' metrics"):
        make_config("--optimizer.ema.beta", "0.9", field, value)
    make_config(field, value)  # without an average the name is free
