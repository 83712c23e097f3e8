"""A learning rate made of segments (``optimizer.segments``), as Levanter computes each kind, in NumPy or JAX.

Each segment is counted from its own start, as optax's ``join_schedules`` counts the pieces Levanter
joins: a ``linear`` segment is ``optax.linear_schedule`` (Levanter's warmup, rewarmup and ``linear``
decay), ``cosine`` is ``optax.cosine_decay_schedule`` (Levanter's ``cosine``), ``inv`` is Levanter's
``inv`` decay and ``wsd_s`` is its cyclic schedule (``cycle_length``, ``warmup``, ``rewarmup``, ``decay``
and ``lr_schedule`` of one cycle). Past its end a segment holds what its formula gives there, so a run
longer than its segments would hold the last rate (the config refuses that run instead).

The same function runs on NumPy (the command line's ``--schedule-at``, without importing JAX) and inside
the jitted step (``xp=jax.numpy``); both compute in float32.

>>> from meltemi.trainer.config import OptimizerConfig
>>> segments = OptimizerConfig(segments=[
...     {"kind": "linear", "start": 0, "end": 4, "from_lr": 0.0, "to_lr": 1.0},
...     {"kind": "constant", "start": 4, "end": 6, "lr": 1.0},
...     {"kind": "linear", "start": 6, "end": 8, "from_lr": 1.0, "to_lr": 0.5}]).segments
>>> [float(segment_rate(segments, step)) for step in range(9)]
[0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.75, 0.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import numpy as np

from meltemi.trainer.config import ConstantSegment, CyclesSegment, RampSegment, ScheduleSegment


def segment_rate(segments: Sequence[ScheduleSegment], step, xp: ModuleType = np):
    """The learning rate at ``step`` (an int, or an int32 array: a traced one with ``xp=jax.numpy``)."""
    step = xp.asarray(step, dtype=xp.int32)
    rate = _one(segments[0], step - segments[0].start, xp)
    for segment in segments[1:]:
        rate = xp.where(step < segment.start, rate, _one(segment, step - segment.start, xp))
    return rate


def _one(segment: ScheduleSegment, count, xp: ModuleType):
    """``segment``'s rate ``count`` steps after its start."""
    if isinstance(segment, ConstantSegment):
        return xp.full(xp.shape(count), segment.lr, dtype=xp.float32)
    if isinstance(segment, RampSegment):
        return ramp(segment.kind, segment.from_lr, segment.to_lr, segment.end - segment.start, count, xp)
    return _cycles(segment, count, xp)


def ramp(kind: str, begin: float, end: float, length: int, count, xp: ModuleType = np):
    """``kind`` (linear, cosine or inv) from ``begin`` at count 0 to ``end`` at ``length``, as optax's
    ``linear_schedule`` and ``cosine_decay_schedule`` and Levanter's ``inv`` compute it.

    >>> [round(float(ramp("inv", 1.0, 0.1, 10, count)), 4) for count in (0, 1, 5, 10, 20)]
    [0.5263, 0.5263, 0.1818, 0.1, 0.1]
    """
    count = xp.asarray(count, dtype=xp.int32)
    steps = xp.float32(max(length, 1))
    if kind == "linear":
        done = xp.clip(count, 0, length).astype(xp.float32)
        return xp.float32(begin - end) * (xp.float32(1) - done / steps) + xp.float32(end)
    if kind == "cosine":
        alpha = end / begin if begin > 0 else 0.0
        done = xp.minimum(count, length).astype(xp.float32)
        half = xp.float32(0.5) * (xp.float32(1) + xp.cos(xp.float32(np.pi) * done / steps))
        return xp.float32(begin) * (xp.float32(1 - alpha) * half + xp.float32(alpha))
    if kind == "inv":
        ratio = xp.float32(begin / end - 1)
        fall = ratio * xp.maximum(count, 1).astype(xp.float32) / steps + xp.float32(1)
        decay = xp.minimum(xp.float32(1), xp.float32(1) / fall)
        return xp.maximum(xp.float32(begin) * decay, xp.float32(end))
    raise ValueError(f"unknown ramp {kind!r}: linear, cosine or inv")


def _cycles(segment: CyclesSegment, count, xp: ModuleType):
    """WSD-S: the cycle ``count`` falls in, and the count within it."""
    warmup, rewarmup, decay = segment.lengths()
    cycle = segment.cycle
    stable_end = cycle - decay  # the first count of each cycle's decay
    reached = float(ramp(segment.shape, segment.peak, segment.floor, decay, decay))  # what a cycle ends at
    index = count // cycle
    within = count - index * cycle
    first = index == 0
    peak = xp.float32(segment.peak)
    warming = xp.where(
        first,
        ramp("linear", 0.0, segment.peak, warmup, within, xp),
        ramp("linear", reached, segment.peak, rewarmup, within, xp),
    )
    decaying = ramp(segment.shape, segment.peak, segment.floor, decay, within - stable_end, xp)
    after = xp.where(within < stable_end, peak, decaying)
    return xp.where(within < xp.where(first, warmup, rewarmup), warming, after)
