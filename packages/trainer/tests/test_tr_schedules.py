"""Learning-rate schedules: warmup rises, WSD holds its plateau, every decay ends on the floor."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from meltemi.trainer.config import OptimizerConfig
from meltemi.trainer.step.schedules import learning_rate_schedule, steps_of

shapes = st.sampled_from(["constant", "cosine", "linear", "wsd"])


def rates(config, steps):
    schedule = learning_rate_schedule(config, steps)
    return np.array([float(schedule(s)) for s in range(steps)])


@given(shape=shapes, steps=st.integers(2, 300), warmup=st.integers(0, 50), peak=st.floats(1e-5, 1.0))
def test_warmup_rises_to_the_peak_and_never_exceeds_it(shape, steps, warmup, peak):
    config = OptimizerConfig(learning_rate=peak, schedule=shape, warmup_steps=warmup)
    lr = rates(config, steps)
    w = min(warmup, steps)
    assert np.all(np.diff(lr[:w]) > 0) and np.all(lr <= peak * (1 + 1e-6)) and np.all(lr > 0)
    if 0 < w:
        assert lr[w - 1] == np.float32(peak)  # exactly: a constant schedule goes on from it without a step


@given(
    shape=st.sampled_from(["cosine", "linear", "wsd"]), steps=st.integers(10, 300), ratio=st.floats(0, 0.9)
)
def test_decays_fall_monotonically_and_reach_the_floor_at_the_last_step(shape, steps, ratio):
    config = OptimizerConfig(
        learning_rate=0.5, schedule=shape, warmup_steps=2, min_lr_ratio=ratio, decay_steps=0.3
    )
    lr = rates(config, steps)
    assert np.all(np.diff(lr[1:]) <= 1e-7)
    np.testing.assert_allclose(lr[-1], 0.5 * ratio, rtol=1e-5, atol=1e-7)


@given(steps=st.integers(20, 300), decay=st.floats(0.05, 0.5))
def test_wsd_holds_the_peak_until_its_decay(steps, decay):
    config = OptimizerConfig(
        learning_rate=0.1, schedule="wsd", warmup_steps=3, decay_steps=decay, min_lr_ratio=0.0
    )
    lr = rates(config, steps)
    stable_end = steps - 1 - steps_of(decay, steps)
    np.testing.assert_allclose(lr[2 : stable_end + 1], 0.1, rtol=1e-6)
    assert lr[stable_end + 1] < 0.1
