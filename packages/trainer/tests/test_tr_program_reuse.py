"""A process keeps the programs of the configs it ran (``step.reuse``): a second run of one config in a
process traces nothing again and ends bitwise as the first; a change to the config, the mesh, the batch size
or the z-loss weight is another program; and the cache keeps only its newest programs."""

from functools import partial

import jax
import jax.numpy as jnp
import pytest

from meltemi.trainer import adapters
from meltemi.trainer.run.trackers import read_metrics
from meltemi.trainer.step import program as program_module
from meltemi.trainer.step.eval_step import make_eval_step
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.reuse import NOT_READ, ProgramCache, program_key
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
        TrainProgram(make_config("--optimizer.learning_rate", "2e-2"), one).jitted(),
        TrainProgram(make_config("--trainer.num_train_steps", "7"), one).jitted(),
        TrainProgram(config, MeshPlan.of(config, jax.devices()[1:2])).jitted(),  # another device
        TrainProgram(config, one).jitted(8),
        TrainProgram(config, one).jitted(None, 1e-4),
    ]
    assert all(other is not jitted for other in others)
    assert len({id(other) for other in others}) == len(others)


def test_no_program_reads_the_fields_left_out_of_its_key(make_config, monkeypatch):
    """Every field of ``NOT_READ`` set to a value no program could use (a string naming it) lowers the train
    step, the eval step and the initialization to the same text: so a run differing only there may share
    them. A program that read one would fail to trace, or lower to other text."""
    config = make_config("--trainer.num_train_steps", "5")
    elsewhere = config.model_copy(update={
        section: getattr(config, section).model_copy(update={name: f"unread {name}" for name in names})
        for section, names in NOT_READ.items()
    })  # fmt: skip
    plan = MeshPlan.of(config, jax.devices()[:1])
    assert program_key("train step", elsewhere, plan) == program_key("train step", config, plan)

    def lowered(config) -> list[str]:
        monkeypatch.setattr(program_module, "PROGRAMS", ProgramCache(16))  # traced afresh, nothing kept
        program = TrainProgram(config, plan)
        state, batch = program.abstract_state(), program.abstract_batch(16)
        lengths = jax.ShapeDtypeStruct((config.model.vocab_size,), jnp.int32)
        with jax.set_mesh(plan.mesh):
            return [
                program.jitted().lower(state, batch).as_text(),
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
