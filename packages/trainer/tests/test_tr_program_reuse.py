"""A process keeps the programs of the configs it ran (``step.reuse``): a second run of one config in a
process traces nothing again and ends bitwise as the first; a change to the config, the mesh, the batch size
or the z-loss weight is another program, a change to the length or the schedule only another schedule
program; and the cache keeps only its newest programs."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meltemi.trainer import adapters
from meltemi.trainer.run.trackers import read_metrics
from meltemi.trainer.step import program as program_module
from meltemi.trainer.step.eval_step import make_eval_step
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.reuse import SCHEDULE, ProgramCache, not_read, program_key
from meltemi.trainer.step.train_step import init_state
from meltemi.trainer.trainer import Trainer


def test_a_second_program_of_one_config_and_mesh_is_the_first(make_config):
    config = make_config()
    first = TrainProgram(config, MeshPlan.of(config, jax.devices()[:1]))
    second = TrainProgram(make_config(), MeshPlan.of(config, jax.devices()[:1]))
    assert second.jitted() is first.jitted()
    assert second.abstract_state() is first.abstract_state()


def test_a_change_to_the_config_the_mesh_the_batch_or_the_z_loss_is_another_program(make_config):
    config = make_config()
    one = MeshPlan.of(config, jax.devices()[:1])
    jitted = TrainProgram(config, one).jitted()
    others = [
        TrainProgram(make_config("--optimizer.beta2", "0.99"), one).jitted(),
        TrainProgram(
            make_config("--trainer.num_train_steps", "7", "--trainer.watch.every", "2"), one
        ).jitted(),
        TrainProgram(config, MeshPlan.of(config, jax.devices()[1:2])).jitted(),  # another device
        TrainProgram(config, one).jitted(8),
        TrainProgram(config, one).jitted(None, 1e-4),
    ]
    assert all(other is not jitted for other in others)
    assert len({id(other) for other in others}) == len(others)


def test_runs_that_differ_in_their_length_or_schedule_share_every_program_but_the_schedules(make_config):
    """The train step takes its learning rate and whether its watched norms are due as an argument
    (``TrainProgram.step_schedule``): a longer run, another peak or another shape of schedule is the same
    step, with its own rates and its own last step."""
    watched = ("--trainer.watch.every", "4")
    config = make_config(*watched)
    one = MeshPlan.of(config, jax.devices()[:1])
    first = TrainProgram(config, one)
    schedule = ["--trainer.num_train_steps", "60", "--optimizer.learning_rate", "3e-3",
                "--optimizer.schedule", "wsd", "--optimizer.warmup_steps", "5", *watched]  # fmt: skip
    longer = TrainProgram(make_config(*schedule), one)
    assert longer.jitted() is first.jitted()
    rates = {program: [program.step_schedule(jnp.asarray(s, jnp.int32)) for s in range(6)]
             for program in (first, longer)}  # fmt: skip
    # cosine from 1e-2 to 1e-3 over steps 0-5; warming up to 3e-3 until step 4
    cosine = [1e-3 + 9e-3 * 0.5 * (1 + np.cos(np.pi * s / 5)) for s in range(6)]
    assert [float(r.rate) for r in rates[first]] == pytest.approx(cosine)
    assert [float(r.rate) for r in rates[longer]] == pytest.approx(
        [3e-3 * (s + 1) / 5 for s in range(5)] + [3e-3]
    )
    assert [bool(r.watch_due) for r in rates[first]] == [
        False,
        False,
        False,
        True,
        False,
        True,
    ]  # 4, the last
    assert [bool(r.watch_due) for r in rates[longer]] == [False, False, False, True, False, False]


def test_no_program_reads_the_fields_left_out_of_its_key(make_config, monkeypatch):
    """Every field of ``NOT_READ`` and of the schedule (``SCHEDULE``) set to a value no program could use (a
    string naming it) lowers the train step, the eval step and the initialization to the same text: so a
    run differing only there may share them. A program that read one would fail to trace, or lower to other
    text."""
    config = make_config("--trainer.num_train_steps", "5")
    elsewhere = config.model_copy(update={
        section: getattr(config, section).model_copy(update={name: f"unread {name}" for name in names})
        for section, names in not_read("train step").items()
    })  # fmt: skip
    assert SCHEDULE["optimizer"] <= not_read("train step")["optimizer"]
    plan = MeshPlan.of(config, jax.devices()[:1])
    assert program_key("train step", elsewhere, plan) == program_key("train step", config, plan)

    def lowered(config) -> list[str]:
        monkeypatch.setattr(program_module, "PROGRAMS", ProgramCache(16))  # traced afresh, nothing kept
        program = TrainProgram(config, plan)
        state, batch = program.abstract_state(), program.abstract_batch(16)
        lengths = jax.ShapeDtypeStruct((config.model.vocab_size,), jnp.int32)
        with jax.set_mesh(plan.mesh):
            return [
                program.jitted().lower(state, batch, program.abstract_schedule()).as_text(),
                jax.jit(make_eval_step(config)).lower(state.model, batch, lengths).as_text(),
                jax.jit(partial(init_state, config)).lower(adapters.jax_key(0, "init")).as_text(),
            ]

    assert lowered(elsewhere) == lowered(config)


def test_a_rerun_in_one_process_traces_no_step_and_ends_bitwise_as_the_first(
    make_config, tmp_path, monkeypatch
):
    traced = []
    real = program_module.make_train_step
    monkeypatch.setattr(program_module, "make_train_step", lambda *a: traced.append(1) or real(*a))
    config = make_config("--trainer.num_train_steps", "3", "--optimizer.learning_rate", "3e-3")
    devices = jax.devices()[:1]
    Trainer(config, tmp_path / "a", devices=devices, progress=False).run()
    after_first = len(traced)
    Trainer(config, tmp_path / "b", devices=devices, progress=False).run()
    assert after_first <= 1 and len(traced) == after_first
    losses = [[r["train/loss"] for r in read_metrics(tmp_path / n / "metrics.jsonl") if "train/loss" in r]
              for n in ("a", "b")]  # fmt: skip
    assert losses[0] == losses[1] and losses[0]


@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_cache_keeps_its_newest_programs(size):
    cache, built = ProgramCache(size), []

    def build(name):
        return lambda: built.append(name) or name

    for name in ("a", "b", "c", "a"):
        cache.get(name, build(name))
    assert built == (["a", "b", "c"] if size == 3 else ["a", "b", "c", "a"])
    cache.get("c", build("c"))  # c was used most recently but one (or last): it is kept
    assert built.count("c") == 1 + (size == 1)
