"""A learning rate made of segments equals Levanter's at every step: each kind alone, WSD-S cycles, and
Marin-8B's six phases stitched as exp600_tootsie.py stitched them (scaled down 100 times)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from meltemi.trainer.config import OptimizerConfig, RunConfig
from meltemi.trainer.step.schedules import learning_rate_schedule
from meltemi.trainer.step.segments import segment_rate


@dataclasses.dataclass(frozen=True)
class Levanter:
    """The fields of Levanter's ``OptimizerConfig`` that shape its learning rate (marin-community/levanter,
    src/levanter/optim/config.py, ``lr_scheduler``), with its defaults."""

    learning_rate: float
    num_train_steps: int
    lr_schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    warmup: float = 0.01
    decay: float | None = None
    rewarmup: float = 0.0
    cycle_length: int | list[int] | None = None


def _steps(value: float, total: int) -> int:
    """Levanter's reading of a length: a fraction of ``total`` up to 1.0, else whole steps."""
    return int(value * total) if value <= 1.0 else int(value)


def levanter_rate(config: Levanter):
    """Levanter's learning-rate function for ``config``, written from its formula: cycles of warmup (the
    first from 0, the others from where the last decay ended), stable, decay, joined by optax."""
    total, peak = config.num_train_steps, config.learning_rate
    floor = peak * config.min_lr_ratio
    if isinstance(config.cycle_length, list):
        points = [0, *np.cumsum(config.cycle_length).tolist()]
    elif config.cycle_length is not None:
        length = _steps(config.cycle_length, total)
        points = [0, *[i * length for i in range(1, total // length)]]
    else:
        points = [0]
    if points[-1] != total:
        points.append(total)
    pieces, boundaries, previous_end = [], [], 0.0
    for cycle, (start, end) in enumerate(zip(points[:-1], points[1:], strict=True)):
        steps = end - start
        warmup = _steps(config.warmup if cycle == 0 else config.rewarmup, steps)
        if warmup:
            pieces.append(optax.linear_schedule(previous_end, peak, warmup))
            boundaries.append(start + warmup)
        decay = _steps(config.decay, steps) if config.decay is not None else steps - warmup
        if steps - warmup - decay:
            pieces.append(optax.constant_schedule(peak))
            boundaries.append(start + steps - decay)
        shape = _decay(config.lr_schedule, peak, floor, config.min_lr_ratio, decay)
        previous_end = shape(decay)
        pieces.append(shape)
        boundaries.append(end)
    return optax.join_schedules(pieces, boundaries[:-1]) if len(pieces) > 1 else pieces[0]


def _decay(kind: str, peak: float, floor: float, ratio: float, length: int):
    if kind == "constant":
        return optax.constant_schedule(peak)
    if kind == "linear":
        return optax.linear_schedule(peak, floor, length)
    if kind == "cosine":
        return optax.cosine_decay_schedule(peak, length, ratio)
    return _inv(peak, floor, length)


def _inv(peak: float, floor: float, length: int):
    def schedule(count):
        decay = jnp.minimum(1.0, 1.0 / ((peak / floor - 1) * jnp.maximum(count, 1) / length + 1))
        return jnp.maximum(peak * decay, floor)

    return schedule


def levanter_rates(config: Levanter, steps: range) -> np.ndarray:
    rate = jax.jit(jax.vmap(levanter_rate(config)))
    return np.asarray(rate(jnp.arange(steps.start, steps.stop, steps.step, dtype=jnp.int32)), np.float32)


def segment_rates(segments: list[dict], steps: range) -> np.ndarray:
    config = OptimizerConfig(segments=segments)
    return np.asarray(
        segment_rate(config.segments, np.arange(steps.start, steps.stop, steps.step)), np.float32
    )


def assert_same(ours: np.ndarray, theirs: np.ndarray, steps: range) -> None:
    """Equal to float32 rounding (a few ulps: NumPy's and XLA's cosines differ in the last bit)."""
    close = np.isclose(ours, theirs, rtol=3e-6, atol=0)
    bad = [(steps[i], float(ours[i]), float(theirs[i])) for i in np.flatnonzero(~close)[:5]]
    assert not bad, f"(step, ours, Levanter's) differ: {bad}"


@settings(max_examples=15, deadline=None)
@given(
    shape=st.sampled_from(["linear", "cosine", "inv"]),
    total=st.integers(20, 400),
    warmup=st.sampled_from([0, *range(2, 16)]),  # 1 would be Levanter's whole run, and our one step
    decay=st.floats(0.05, 0.8),
    peak=st.floats(1e-5, 1.0),
    ratio=st.floats(0.01, 0.5),
)
def test_warmup_stable_decay_equals_levanters(shape, total, warmup, decay, peak, ratio):
    levanter = Levanter(peak, total, shape, ratio, warmup=warmup, decay=decay)
    decay_steps = int(decay * total)
    assume(warmup + decay_steps <= total)  # else Levanter's pieces overlap (a stable part of negative length)
    segments = []
    if warmup:
        segments.append({"kind": "linear", "start": 0, "end": warmup, "from_lr": 0.0, "to_lr": peak})
    if total - decay_steps > warmup:
        segments.append({"kind": "constant", "start": warmup, "end": total - decay_steps, "lr": peak})
    start = max(warmup, total - decay_steps)
    segments.append({"kind": shape, "start": start, "end": total, "from_lr": peak, "to_lr": peak * ratio})
    steps = range(total)
    assert_same(segment_rates(segments, steps), levanter_rates(levanter, steps), steps)


@settings(max_examples=12, deadline=None)
@given(
    shape=st.sampled_from(["linear", "cosine", "inv"]),
    cycle=st.integers(10, 60),
    cycles=st.integers(1, 5),
    warmup=st.sampled_from([0, 2, 3, 4]),  # 1 would be Levanter's whole cycle, and our one step
    rewarmup=st.sampled_from([0, 2, 3, 4]),
    decay=st.floats(0.1, 0.5),
)
def test_wsd_s_cycles_equal_levanters(shape, cycle, cycles, warmup, rewarmup, decay):
    total = cycle * cycles
    levanter = Levanter(1e-3, total, shape, 0.1, warmup, decay, rewarmup, cycle_length=cycle)
    segment = {"kind": "wsd_s", "start": 0, "end": total, "peak": 1e-3, "floor": 1e-4, "cycle": cycle,
               "warmup": warmup, "rewarmup": rewarmup, "decay": decay, "shape": shape}  # fmt: skip
    steps = range(total)
    assert_same(segment_rates([segment], steps), levanter_rates(levanter, steps), steps)


# Marin-8B's phases (marin-community/marin experiments/tootsie/exp600_tootsie.py), every step count / 100.
KESTREL = Levanter(1e-3, 10_000, "inv", warmup=10, decay=0.1, cycle_length=100)
OCELOT = Levanter(1.7e-3, 10_000, "linear", decay=0.0)
JELLYFISH_DECAY = (8_200 - 7_405) / 8_200
JELLYFISH = Levanter(1.7e-3, 8_200, "linear", decay=JELLYFISH_DECAY)
PHOENIX = Levanter(1.7e-3, 20_000, "linear", decay=JELLYFISH_DECAY, rewarmup=20, cycle_length=[8_200, 11_800])
STARLING = Levanter(1.7e-3, 14_000, "linear", min_lr_ratio=0.01, decay=800)
DEEPER_STARLING = Levanter(1.7e-5, 14_200, "linear", min_lr_ratio=1.0, decay=0)
MARIN_PHASES = [  # (first step, the step after the last, Levanter's config of the phase)
    (0, 6_600, KESTREL),
    (6_600, 7_405, OCELOT),
    (7_405, 8_200, JELLYFISH),
    (8_200, 13_200, PHOENIX),
    (13_200, 14_000, STARLING),
    (14_000, 14_200, DEEPER_STARLING),
]
MARIN_SEGMENTS = [
    {"kind": "wsd_s", "start": 0, "end": 6_600, "name": "Kestrel", "peak": 1e-3, "floor": 1e-4,
     "cycle": 100, "warmup": 10, "decay": 0.1, "shape": "inv"},
    {"kind": "constant", "start": 6_600, "end": 7_405, "name": "Ocelot", "lr": 1.7e-3},
    {"kind": "linear", "start": 7_405, "end": 8_200, "name": "Jellyfish", "from_lr": 1.7e-3, "to_lr": 1.7e-4},
    {"kind": "linear", "start": 8_200, "end": 8_220, "name": "Phoenix", "from_lr": 1.7e-4, "to_lr": 1.7e-3},
    {"kind": "constant", "start": 8_220, "end": 13_200, "name": "Phoenix", "lr": 1.7e-3},
    {"kind": "linear", "start": 13_200, "end": 14_000, "name": "Starling", "from_lr": 1.7e-3,
     "to_lr": 1.7e-5},
    {"kind": "constant", "start": 14_000, "end": 14_200, "name": "Deeper Starling", "lr": 1.7e-5},
]  # fmt: skip


PHASE_NAMES = ["Kestrel", "Ocelot", "Jellyfish", "Phoenix", "Starling", "Deeper Starling"]


@pytest.mark.parametrize(("start", "end", "levanter"), MARIN_PHASES, ids=PHASE_NAMES)
def test_marins_phases_as_segments_equal_levanters_at_every_step(start, end, levanter):
    steps = range(start, end)
    assert_same(segment_rates(MARIN_SEGMENTS, steps), levanter_rates(levanter, steps), steps)


def test_the_jitted_schedule_is_the_numpy_one():
    """The train step's rate (JAX, jitted) is what --schedule-at prints (NumPy, without JAX)."""
    config = OptimizerConfig(segments=MARIN_SEGMENTS)
    rate = jax.jit(jax.vmap(learning_rate_schedule(config, 14_200)))
    steps = range(0, 14_200, 7)
    jitted = np.asarray(rate(jnp.arange(0, 14_200, 7, dtype=jnp.int32)), np.float32)
    assert_same(segment_rates(MARIN_SEGMENTS, steps), jitted, steps)


def _error(**optimizer) -> str:
    with pytest.raises(ValidationError) as caught:
        RunConfig.model_validate({"optimizer": optimizer, "trainer": {"num_train_steps": 100}})
    return str(caught.value)


def test_segments_that_overlap_or_leave_a_gap_are_refused_naming_the_phase():
    one = {"kind": "constant", "start": 0, "end": 50, "lr": 1e-3}
    message = _error(segments=[one, {"kind": "constant", "start": 40, "end": 100, "lr": 1e-3, "name": "B"}])
    assert (
        "optimizer.segments[1] (B) starts at step 40 and overlaps the one before, which ends at step 50"
        in message
    )
    message = _error(segments=[one, {"kind": "constant", "start": 60, "end": 100, "lr": 1e-3}])
    assert "leaves a gap after the one before" in message
    message = _error(segments=[{"kind": "constant", "start": 5, "end": 100, "lr": 1e-3}])
    assert "starts at step 5" in message and "the first at 0" in message


def test_segments_must_cover_the_run_and_replace_the_simple_schedule():
    assert "end at step 50, before trainer.num_train_steps (100)" in _error(
        segments=[{"kind": "constant", "start": 0, "end": 50, "lr": 1e-3}]
    )
    both = _error(schedule="wsd", segments=[{"kind": "constant", "start": 0, "end": 100, "lr": 1e-3}])
    assert "optimizer.schedule would be ignored" in both


@pytest.mark.parametrize(
    ("segment", "words"),
    [
        ({"kind": "inv", "from_lr": 1e-3, "to_lr": 0.0}, "a floor above 0"),
        ({"kind": "cosine", "from_lr": 1e-4, "to_lr": 1e-3}, "a rise is a linear segment"),
        ({"kind": "wsd_s", "peak": 1e-3, "floor": 1e-4, "cycle": 10, "warmup": 5, "decay": 6}, "cannot hold"),
        ({"kind": "ramp", "lr": 1e-3}, "'constant', 'linear', 'cosine', 'inv', 'wsd_s'"),
    ],
)
def test_a_segment_that_cannot_be_computed_says_why(segment, words):
    assert words in _error(segments=[{"start": 0, "end": 100, **segment}])
