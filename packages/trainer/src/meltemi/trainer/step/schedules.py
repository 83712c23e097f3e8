"""Learning-rate schedules: linear warmup, then constant, cosine, linear, or warmup-stable-decay (WSD); or
segments of each kind with their own rates (:mod:`meltemi.trainer.step.segments`).

Each is a pure function of the step (a JAX scalar inside the jitted step), so a resumed run and an
uninterrupted one use the same rate at every step. Decays reach ``min_lr_ratio * learning_rate`` at the
run's last step.

>>> from meltemi.trainer.config import OptimizerConfig
>>> lr = learning_rate_schedule(OptimizerConfig(learning_rate=1.0, warmup_steps=2, schedule="wsd",
...                                             decay_steps=2, min_lr_ratio=0.0), num_steps=8)
>>> [round(float(lr(s)), 2) for s in range(8)]
[0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from meltemi.trainer.config import OptimizerConfig, SchedulePhase
from meltemi.trainer.step.segments import segment_rate


def steps_of(value: float, num_steps: int) -> int:
    """A length given as steps (``>= 1``) or as a fraction of the run (``< 1``), in steps.

    >>> steps_of(0.1, 1000), steps_of(50, 1000)
    (100, 50)
    """
    return int(round(value * num_steps)) if value < 1 else int(value)


def learning_rate_schedule(config: OptimizerConfig, num_steps: int) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """The rate at each step: ``(step + 1) / warmup`` of the peak during warmup, then the configured shape.

    A run extended with new phases (``config.phases``) follows each from its start: a warmup from the rate
    the one before reached there back to the peak, then the shape again, reaching the floor at its end.
    A schedule given as segments (``config.segments``) is theirs, whatever the run's length.
    """
    if config.segments:
        segments = list(config.segments)
        return lambda step: segment_rate(segments, step, jnp)
    phases = config.phases or [SchedulePhase(start=0, end=num_steps)]
    rate = _phase(config, phases[0].end, 0.0)
    for phase in phases[1:]:
        with jax.ensure_compile_time_eval():
            begin = float(rate(phase.start))
        rate = _after(rate, phase.start, _phase(config, phase.end - phase.start, begin))
    return rate


def _phase(config: OptimizerConfig, num_steps: int, begin: float) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """One phase of ``num_steps``, counted from its first step: warmup from ``begin``, then the shape."""
    peak, floor = config.learning_rate, config.learning_rate * config.min_lr_ratio
    warmup = min(steps_of(config.warmup_steps, num_steps), num_steps)
    last = num_steps - 1
    # The last step at the peak: the end of warmup, or for WSD the end of the stable phase.
    decay_start = max(warmup - 1, 0)
    if config.schedule == "wsd":
        decay_start = max(decay_start, num_steps - 1 - steps_of(config.decay_steps, num_steps))

    def rate(step):
        step = jnp.asarray(step, jnp.float32)
        if begin == 0.0:
            warming = peak * (step + 1) / max(warmup, 1)
        else:
            warming = begin + (peak - begin) * (step + 1) / max(warmup, 1)
        # The last warmup step is the peak itself: in float32, peak * w / w may fall an ulp short of it.
        warming = jnp.where(step + 1 >= warmup, peak, warming)
        progress = jnp.clip((step - decay_start) / max(last - decay_start, 1), 0.0, 1.0)
        if config.schedule == "constant":
            after = jnp.full_like(step, peak)
        elif config.schedule == "cosine":
            after = floor + (peak - floor) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
        else:  # linear, and the decay phase of wsd (flat before decay_start, where progress is 0)
            after = peak + (floor - peak) * progress
        return jnp.where(step < warmup, warming, after)

    return rate


def _after(before: Callable, start: int, phase: Callable) -> Callable[[jnp.ndarray], jnp.ndarray]:
    """``before`` until step ``start``, then ``phase`` counted from it."""

    def rate(step):
        step = jnp.asarray(step, jnp.float32)
        return jnp.where(step < start, before(step), phase(step - start))

    return rate
