"""One step counter drives the learning rate: the train state's. The rate applied to the parameters is the
one logged, after a skipped (non-finite) step too, and ``initialize_from.reset_step`` restarts it.

The applied rate is measured, not read: the same step is run from the same state with a rate of 1 (the
train step takes its schedule as an argument, computed by the trainer's program from the state's step),
and the parameter changes of the two are in the ratio of their rates."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.resume import starting_state
from meltemi.trainer.phase.initialize import initialize_from_base
from meltemi.trainer.step.reuse import PROGRAMS, program_key
from meltemi.trainer.step.schedules import learning_rate_schedule
from meltemi.trainer.step.train_step import StepSchedule, init_state, make_train_step
from meltemi.trainer.trainer import Trainer

pytestmark = pytest.mark.xdist_group("trainer-learning-rate")  # one worker: the tests share their steps

WARMUP = ("--optimizer.warmup_steps", "4")  # the rate differs at every one of the first steps


def jitted_step(config, plan):
    """``config``'s train step, jitted once per program and kept as the trainer keeps its own
    (``step.reuse``: both tests' configs differ only in their schedule, so this is one program). Its state
    is not donated (the trainer's is), since the tests step one state twice."""
    key = program_key("train step, state not donated", config, plan)
    return PROGRAMS.get(key, lambda: jax.jit(make_train_step(config)))


def applied_and_logged_rate(trainer, config, state, batch) -> tuple[float, float]:
    """The rate the step applies to ``state`` on ``batch`` (measured) and the one it reports, at the rate
    the trainer's program gives the state's step."""
    step = jitted_step(config, trainer.program.plan)
    schedule = trainer.program.step_schedule(state.step)
    after, metrics = step(state, batch, schedule)
    unit, _ = step(state, batch, schedule._replace(rate=jnp.float32(1.0)))
    before = np.asarray(state.model.layers.stacked.mlp.up_proj.weight.array, np.float64)
    moved = np.asarray(after.model.layers.stacked.mlp.up_proj.weight.array, np.float64) - before
    moved_by_one = np.asarray(unit.model.layers.stacked.mlp.up_proj.weight.array, np.float64) - before
    large = np.abs(moved_by_one) > 1e-2
    assert large.sum() > 100
    return float(np.median(moved[large] / moved_by_one[large])), float(metrics.learning_rate)


def batch_of(trainer, step=0):
    return adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(step)))


def test_after_a_skipped_step_the_applied_rate_is_the_logged_one(make_config, run_dir):
    config = make_config(*WARMUP)
    schedule = learning_rate_schedule(config.optimizer, config.trainer.num_train_steps)
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    batch = batch_of(trainer)
    bad = int(np.asarray(batch.input_ids.array)[0, 0])
    # Jitted as the trainer runs it; eagerly each op of the init compiled on its own.
    state = jax.jit(lambda key: init_state(config, key))(adapters.jax_key(0, "init"))
    weight = state.model.embed_tokens.weight
    poisoned = jax.tree_util.tree_map(lambda x: weight.array.at[bad].set(jnp.nan) if x is weight.array else x,
                                      state, is_leaf=lambda x: x is weight.array)  # fmt: skip
    skipped, metrics = jitted_step(config, trainer.program.plan)(poisoned, batch, StepSchedule(1.0, False))
    assert not bool(metrics.applied) and int(skipped.step) == 1
    ids = jnp.where(batch.input_ids.array == bad, (bad + 1) % config.model.vocab_size, batch.input_ids.array)
    clean = eqx.tree_at(lambda b: b.input_ids, batch, hax.named(ids, batch.input_ids.axes))
    applied, logged = applied_and_logged_rate(trainer, config, skipped, clean)
    np.testing.assert_allclose(logged, float(schedule(1)), rtol=1e-6)
    np.testing.assert_allclose(applied, logged, rtol=1e-4)


def test_a_new_phase_with_reset_step_restarts_the_applied_schedule(make_config, shared, tmp_path):
    def four_steps(root):
        config = make_config("--trainer.num_train_steps", "4", *WARMUP)
        Trainer(config, root / "run", devices=jax.devices()[:1], progress=False).run()

    source = shared.get("learning-rate-phase-1", four_steps) / "run"
    # 6 steps, as the test above: the same program (a phase longer than the first's 4 is what matters).
    config = make_config("--trainer.num_train_steps", "6", *WARMUP,
                         "--trainer.initialize_from", f"{{path: {source}, reset_step: true}}")  # fmt: skip
    trainer = Trainer(config, tmp_path / "phase2", devices=jax.devices()[:1], progress=False)
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert int(start.state.step) == 0
    applied, logged = applied_and_logged_rate(trainer, config, start.state, batch_of(trainer))
    schedule = learning_rate_schedule(config.optimizer, 6)
    np.testing.assert_allclose(logged, float(schedule(0)), rtol=1e-6)
    np.testing.assert_allclose(applied, logged, rtol=1e-4)
