"""A run's schedule step by step and phase by phase: the learning rate, batch size and mixture weights the
config gives each step, computed without JAX (``--schedule-at``, and the dry run's phase table).

A phase is a run of consecutive ``optimizer.segments`` with one name (Marin-8B's Phoenix is a rewarm and a
constant rate); a run without segments is one phase.

>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig.model_validate({
...     "optimizer": {"segments": [
...         {"kind": "linear", "start": 0, "end": 10, "from_lr": 0.0, "to_lr": 1e-3, "name": "warmup"},
...         {"kind": "constant", "start": 10, "end": 100, "lr": 1e-3, "name": "stable"}]},
...     "trainer": {"num_train_steps": 100, "global_batch_size": [[0, 8], [50, 16]]},
...     "data": {"sources": {"web": {"store": "w"}, "code": {"store": "c", "weight": 0.5}}}})
>>> print(schedule_line(config, 60))
step 60 lr 0.00100000005 batch 16 web=0.666666667 code=0.333333333
>>> [(phase.name, phase.start, phase.end, phase.tokens) for phase in phases(config)]
[('warmup', 0, 10, 163840), ('stable', 10, 100, 2293760)]
"""

from __future__ import annotations

import dataclasses

from meltemi.datastore.loader import BatchSchedule
from meltemi.trainer.config import DataConfig, RunConfig
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.step.segments import segment_rate

SIGNIFICANT = 9  # digits printed of a rate or a weight: float32's, and then some


def learning_rate_at(config: RunConfig, step: int) -> float:
    """The learning rate of ``step``, as the train step computes it (float32).

    A schedule of segments is computed here without JAX; one of ``optimizer.schedule``'s shapes is
    JAX's own function, evaluated once."""
    if config.optimizer.segments:
        return float(segment_rate(config.optimizer.segments, step))
    from meltemi.trainer.step.schedules import learning_rate_schedule

    return float(learning_rate_schedule(config.optimizer, config.trainer.num_train_steps)(step))


def mixture_at(data: DataConfig, step: int) -> dict[str, float]:
    """Each source's share of the mixture at ``step`` (the weights in effect, over their sum), every
    source named, 0 for those the stage leaves out.

    >>> data = DataConfig.model_validate({"sources": {"a": {"store": "a"}, "b": {"store": "b"}},
    ...                                   "stages": [{"start_step": 0, "weights": {"a": 3}},
    ...                                              {"start_step": 5, "weights": {"a": 1, "b": 3}}]})
    >>> mixture_at(data, 4), mixture_at(data, 5)
    ({'a': 1.0, 'b': 0.0}, {'a': 0.25, 'b': 0.75})
    """
    weights = {name: source.weight for name, source in data.sources.items()}
    started = [stage for stage in data.stages if stage.start_step <= step]
    if started:
        weights = {name: float(started[-1].weights.get(name, 0.0)) for name in data.sources}
    total = sum(weights.values())
    return {name: (weight / total if total else 0.0) for name, weight in weights.items()}


def schedule_line(config: RunConfig, step: int) -> str:
    """``step N lr X batch B name=weight ...``: what the config gives step ``step``."""
    if not 0 <= step < config.trainer.num_train_steps:
        raise ConfigError(
            f"--schedule-at {step}: the run's steps are 0 to {config.trainer.num_train_steps - 1} "
            "(trainer.num_train_steps)"
        )
    rows = BatchSchedule(config.trainer.global_batch_size).size(step)
    shares = " ".join(
        f"{name}={share:.{SIGNIFICANT}g}" for name, share in mixture_at(config.data, step).items()
    )
    return f"step {step} lr {learning_rate_at(config, step):.{SIGNIFICANT}g} batch {rows} {shares}".rstrip()


@dataclasses.dataclass(frozen=True)
class Phase:
    """Steps ``start`` to ``end - 1`` of one named phase: its tokens, the batch sizes and learning rates at
    its first and last steps, and the mixture stages that start in it (their first step and shares)."""

    name: str
    start: int
    end: int
    tokens: int
    batch: tuple[int, int]
    learning_rate: tuple[float, float]
    mixtures: tuple[tuple[int, dict[str, float]], ...]


def phases(config: RunConfig) -> list[Phase]:
    """The run's phases, in order: named segments merged where consecutive ones share a name."""
    steps = config.trainer.num_train_steps
    segments = config.optimizer.segments
    spans: list[tuple[str, int, int]] = []
    for index, segment in enumerate(segments):
        name = segment.name or f"segment {index}"
        if spans and spans[-1][0] == name and segment.name:
            spans[-1] = (name, spans[-1][1], segment.end)
        else:
            spans.append((name, segment.start, segment.end))
    spans = [(name, start, min(end, steps)) for name, start, end in spans if start < steps] or [
        ("run", 0, steps)
    ]
    batches = BatchSchedule(config.trainer.global_batch_size)
    seq_len = config.data.seq_len
    changes = sorted({0, *(stage.start_step for stage in config.data.stages)})
    result = []
    for name, start, end in spans:
        inside = [step for step in changes if start < step < end]
        mixtures = tuple((step, mixture_at(config.data, step)) for step in [start, *inside])
        result.append(
            Phase(
                name=name,
                start=start,
                end=end,
                tokens=(batches.first_row(end) - batches.first_row(start)) * seq_len,
                batch=(batches.size(start), batches.size(end - 1)),
                learning_rate=(learning_rate_at(config, start), learning_rate_at(config, end - 1)),
                mixtures=mixtures,
            )
        )
    return result


def format_phases(config: RunConfig, shown: int = 3) -> str:
    """The phase table: steps, tokens, batch, learning rate from -> to, and the ``shown`` largest shares
    of each mixture that starts in the phase."""
    rows = [("phase", "steps", "tokens", "batch", "learning rate", "mixture")]
    for phase in phases(config):
        first, last = phase.batch
        batch = f"{first:,}" if first == last else f"{first:,} -> {last:,}"
        rate = f"{phase.learning_rate[0]:.3g} -> {phase.learning_rate[1]:.3g}"
        mixture = "; ".join(
            (f"from {step:,}: " if step != phase.start else "") + _largest(shares, shown)
            for step, shares in phase.mixtures
        )
        steps = f"{phase.start:,}-{phase.end - 1:,}"
        rows.append((phase.name, steps, _tokens(phase.tokens), batch, rate, mixture))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) for row in rows]
    return "\n".join(f"{line}  {row[5]}" for line, row in zip(lines, rows, strict=True))


def _largest(shares: dict[str, float], shown: int) -> str:
    ranked = sorted(((name, share) for name, share in shares.items() if share > 0), key=lambda kv: -kv[1])
    words = [f"{name} {share:.1%}" for name, share in ranked[:shown]]
    if len(ranked) > shown:
        words.append(f"+{len(ranked) - shown} more")
    return ", ".join(words)


def _tokens(count: int) -> str:
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return str(count)
