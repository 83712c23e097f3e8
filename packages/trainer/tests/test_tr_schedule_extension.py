"""A run resumed with a new length: its learning rate goes on as ``optimizer.extension`` says (the old
schedule's tail, a new decay phase, the schedule recomputed), never jumps unasked, and resuming again
follows the same schedule."""

import json
import shutil

import jax
import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from meltemi.trainer.config import OptimizerConfig, RunConfig, SchedulePhase
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.step.schedule_extension import continue_schedule
from meltemi.trainer.step.schedules import learning_rate_schedule
from meltemi.trainer.trainer import Trainer

shapes = st.sampled_from(["constant", "cosine", "linear", "wsd"])
TINY = {"learning_rate": 3e-3, "schedule": "cosine", "warmup_steps": 6, "min_lr_ratio": 0.1}


def rates(optimizer: OptimizerConfig, steps: int) -> np.ndarray:
    schedule = learning_rate_schedule(optimizer, steps)
    return np.array([float(schedule(s)) for s in range(steps)])


def run_config(steps: int, **optimizer) -> RunConfig:
    return RunConfig.model_validate(
        {"trainer": {"num_train_steps": steps}, "optimizer": {**TINY, **optimizer}}
    )


def saved(steps: int, **optimizer) -> dict:
    return run_config(steps, **optimizer).model_dump(mode="json")


@given(shape=shapes, steps=st.integers(2, 200), warmup=st.integers(0, 30))
def test_one_phase_over_the_run_is_the_schedule_itself(shape, steps, warmup):
    plain = OptimizerConfig(learning_rate=0.1, schedule=shape, warmup_steps=warmup)
    phased = plain.model_copy(update={"phases": [SchedulePhase(start=0, end=steps)]})
    assert np.array_equal(rates(plain, steps), rates(phased, steps))  # bitwise: old runs resume unchanged


@given(shape=shapes, old=st.integers(5, 100), more=st.integers(1, 100))
@example(
    shape="constant", old=6, more=1
)  # ends on warmup's last step: 3e-3 * 6 / 6 is an ulp short in float32
def test_the_tail_is_the_old_schedule_then_its_floor(shape, old, more):
    optimizer = OptimizerConfig(**{**TINY, "schedule": shape})
    tail = optimizer.model_copy(update={"phases": [SchedulePhase(start=0, end=old)]})
    extended = rates(tail, old + more)
    assert np.array_equal(extended[:old], rates(optimizer, old))
    assert np.all(
        extended[old:] == extended[old - 1] if shape == "constant" else extended[old:] <= extended[old - 1]
    )


@given(shape=st.sampled_from(["cosine", "linear", "wsd"]), old=st.integers(10, 100), at=st.integers(1, 100),
       more=st.integers(10, 100))  # fmt: skip
def test_a_decay_phase_starts_where_the_run_is_and_ends_on_the_floor(shape, old, at, more):
    at = min(at, old)
    steps = at + more
    assume(steps != old)  # the same length keeps the old schedule: no extension, no decay phase
    config, _ = continue_schedule(
        run_config(steps, schedule=shape, extension="decay"), saved(old, schedule=shape), at
    )
    before = rates(OptimizerConfig(**{**TINY, "schedule": shape}), old)
    after = rates(config.optimizer, steps)
    assert np.array_equal(after[:at], before[:at])
    peak, floor = TINY["learning_rate"], TINY["learning_rate"] * TINY["min_lr_ratio"]
    reached = float(learning_rate_schedule(OptimizerConfig(**{**TINY, "schedule": shape}), old)(at))
    tiny = 1e-9  # the float32 rounding of the rates
    assert reached - tiny <= after[at] <= reached + max(peak - reached, 0) / 6 + tiny  # one warmup step up
    np.testing.assert_allclose(after[at + 5], peak, rtol=1e-5)
    np.testing.assert_allclose(after[-1], floor, rtol=1e-5)


def test_a_cosine_stretched_after_its_end_is_refused_with_each_choices_rate():
    with pytest.raises(ConfigError) as refused:
        continue_schedule(run_config(80), saved(60), step=60)
    message = str(refused.value)
    assert message.startswith(
        "trainer.num_train_steps 80: the checkpoint at step 60 was trained for 60 steps"
    )
    assert "moves the learning rate at step 60 from 3.00e-04 to 7.16e-04" in message
    for choice in (
        "--optimizer.extension tail",
        "decay (a new phase over steps 60-79",
        "restretch (the jump)",
    ):
        assert choice in message


@pytest.mark.parametrize(
    ("optimizer", "at"),
    [({"schedule": "constant"}, 60), ({"schedule": "wsd", "decay_steps": 10}, 40)],
    ids=["constant", "wsd-stable"],
)
def test_a_schedule_that_does_not_jump_goes_on_unasked(optimizer, at):
    config, note = continue_schedule(run_config(80, **optimizer), saved(60, **optimizer), step=at)
    assert note is None and config.optimizer.phases == []
    was = learning_rate_schedule(OptimizerConfig(**{**TINY, **optimizer}), 60)(at)
    np.testing.assert_allclose(learning_rate_schedule(config.optimizer, 80)(at), was, rtol=1e-6)


def test_a_wsd_schedule_in_its_decay_is_refused_like_a_cosine():
    with pytest.raises(ConfigError, match="wsd schedule recomputed over 80 steps moves"):
        continue_schedule(
            run_config(80, schedule="wsd", decay_steps=10), saved(60, schedule="wsd", decay_steps=10), 55
        )


def test_the_recorded_phases_follow_the_run_and_resolving_twice_changes_nothing():
    config, note = continue_schedule(run_config(80, extension="decay"), saved(60), step=60)
    assert [(p.start, p.end) for p in config.optimizer.phases] == [(0, 60), (60, 80)]
    assert "the schedule goes on by decay (a new phase over steps 60-79: warmup back to 3.00e-03" in note
    assert continue_schedule(config, saved(60), step=60)[0] == config  # the launcher's and the run's
    # Preempted at 70 and resumed with the same command: the checkpoint's phases, not a new one.
    again, note = continue_schedule(run_config(80, extension="decay"), config.model_dump(mode="json"), 70)
    assert again.optimizer.phases == config.optimizer.phases and note is None
    # Extended again by its tail: the phases stay; restretched: they go.
    longer, _ = continue_schedule(run_config(90, extension="tail"), config.model_dump(mode="json"), 80)
    assert longer.optimizer.phases == config.optimizer.phases
    anew, _ = continue_schedule(run_config(90, extension="restretch"), config.model_dump(mode="json"), 80)
    assert anew.optimizer.phases == []


def test_a_decay_with_no_steps_left_is_refused():
    with pytest.raises(ConfigError, match="checkpoint is at step 60 and trainer.num_train_steps is 61, which "
                                          "leaves no steps for a new decay phase"):  # fmt: skip
        continue_schedule(run_config(61, extension="decay"), saved(60), step=60)


def test_phases_that_do_not_start_at_zero_or_go_back_are_refused():
    with pytest.raises(ValueError, match="the first phase must start at step 0, not 5"):
        OptimizerConfig(phases=[SchedulePhase(start=5, end=10)])
    with pytest.raises(ValueError, match=r"starts must increase, got \[0, 0\]"):
        OptimizerConfig(phases=[SchedulePhase(start=0, end=10), SchedulePhase(start=0, end=20)])
    with pytest.raises(ValueError, match="must end after it starts"):
        SchedulePhase(start=10, end=10)


def learning_rates(run_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["train/learning_rate"] for row in rows if "train/learning_rate" in row}


@pytest.fixture
def finished(make_config, shared):
    """A finished 4-step cosine run (checkpoint at step 4), trained once per session."""
    config = make_config(
        "--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "4", "--trainer.log_every", "1"
    )

    def build(root):
        Trainer(config, root / "run", devices=jax.devices()[:1], progress=False).run()

    return shared.get("schedule-extension-run", build) / "run"


def test_a_finished_run_extended_without_a_choice_is_refused_before_anything_changes(
    make_config, finished, tmp_path
):
    shutil.copytree(finished, tmp_path / "run")
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*"))
    config = make_config("--trainer.num_train_steps", "6", "--trainer.checkpoint_every", "2")
    with pytest.raises(
        ConfigError, match="trainer.num_train_steps 6: the checkpoint at step 4 was trained for 4"
    ):
        Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "run").rglob("*")) == before


@pytest.mark.parametrize("choice", ["tail", "decay"])
def test_an_extended_run_applies_and_records_the_chosen_schedule(make_config, finished, tmp_path, choice):
    shutil.copytree(finished, tmp_path / "run")
    config = make_config("--trainer.num_train_steps", "7", "--trainer.checkpoint_every", "1",
                         "--trainer.log_every", "1", "--optimizer.extension", choice)  # fmt: skip
    Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False).run()
    logged = learning_rates(tmp_path / "run")
    floor = 1e-2 * 0.1  # make_config's peak, the default floor ratio
    np.testing.assert_allclose(logged[4], floor, rtol=1e-5)  # the old run's last step
    if choice == "tail":
        np.testing.assert_allclose([logged[5], logged[6], logged[7]], floor, rtol=1e-5)
    else:  # warmup of one step back to the peak, then the cosine over steps 4-6 down to the floor
        np.testing.assert_allclose([logged[5], logged[7]], [1e-2, floor], rtol=1e-5)
    manifest = json.loads((tmp_path / "run" / "checkpoints" / "step-7" / "manifest.json").read_text())
    phases = manifest["config"]["optimizer"]["phases"]
    assert phases == [{"start": 0, "end": 4}] + ([{"start": 4, "end": 7}] if choice == "decay" else [])
