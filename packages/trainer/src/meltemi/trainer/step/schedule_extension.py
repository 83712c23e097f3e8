"""A resumed run whose length changed: how its learning-rate schedule goes on from the checkpoint.

Recomputing a decaying schedule over a new length moves the rate at the step the run resumes from: a
60-step cosine run extended to 80 would jump from its floor, 3.0e-4, back to 5.65e-4. A run resumed with a
new ``trainer.num_train_steps`` therefore goes on as ``optimizer.extension`` says: ``tail`` (the old
schedule, which holds its floor after its end), ``decay`` (a new phase over the added steps: warmup from the
rate reached back to the peak, then the schedule's shape to the floor at the new end, as a new cycle in the
peers' cyclic schedules) or ``restretch`` (the schedule recomputed over the new length). Without a choice a
run goes on only where the rate does not jump (a constant schedule; a WSD schedule still in its stable
phase), and is otherwise refused with the rates each choice gives. The phases a choice makes are recorded in
the config (``optimizer.phases``) and so in every later checkpoint: resuming again follows the same schedule.

>>> from meltemi.trainer.config import RunConfig
>>> saved = RunConfig.model_validate({"trainer": {"num_train_steps": 60}}).model_dump(mode="json")
>>> longer = RunConfig.model_validate({"trainer": {"num_train_steps": 80},
...                                   "optimizer": {"extension": "tail"}})
>>> config, note = continue_schedule(longer, saved, step=60)
>>> [(phase.start, phase.end) for phase in config.optimizer.phases]
[(0, 60)]
>>> print(note)
trainer.num_train_steps 60 -> 80: the schedule goes on by tail (the old schedule, then its floor); the
learning rate at step 60 is 3.00e-05 (it was 3.00e-05)
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from meltemi.trainer.config import OptimizerConfig, RunConfig, SchedulePhase
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.step.schedules import learning_rate_schedule

SAME_RATE = 1e-4  # relative: rates closer than this are the same rate (float32 rounding, not a jump)


def continue_schedule(config: RunConfig, saved: dict[str, Any], step: int) -> tuple[RunConfig, str | None]:
    """``config`` with the schedule phases that continue a checkpoint at ``step`` trained with the config
    ``saved`` (a manifest's), and a line saying how the schedule was extended (None when it was not).

    The same run length keeps the checkpoint's phases; a changed one is extended as
    ``config.optimizer.extension`` says, or refused with a ``ConfigError`` when no choice is made and the
    rate would jump."""
    before = _saved_schedule(saved)
    if before is None:
        return config, None
    optimizer, steps = config.optimizer, config.trainer.num_train_steps
    old, old_steps = before
    if steps == old_steps:
        return _with_phases(config, old.phases), None
    was = float(learning_rate_schedule(old, old_steps)(step))
    phases = old.phases or [SchedulePhase(start=0, end=old_steps)]
    choice = optimizer.extension
    if choice is None:
        stretched = float(learning_rate_schedule(optimizer.model_copy(update={"phases": []}), steps)(step))
        if not math.isclose(was, stretched, rel_tol=SAME_RATE):
            raise ConfigError(_jump(config, old_steps, step, was, stretched))
        return _with_phases(config, []), None
    if choice == "tail":
        new_phases = phases
    elif choice == "decay":
        if step >= steps - 1:
            raise ConfigError(
                f"optimizer.extension decay: the checkpoint is at step {step} and trainer.num_train_steps is "
                f"{steps}, which leaves no steps for a new decay phase"
            )
        new_phases = [phase for phase in phases if phase.start < step] + [
            SchedulePhase(start=step, end=steps)
        ]
    else:
        new_phases = []
    extended = _with_phases(config, new_phases)
    now = float(learning_rate_schedule(extended.optimizer, steps)(step))
    return extended, (
        f"trainer.num_train_steps {old_steps} -> {steps}: the schedule goes on by {choice} "
        f"({_how(choice, optimizer, step, steps)}); the learning rate at step {step} is {now:.2e} "
        f"(it was {was:.2e})"
    )


def _saved_schedule(saved: dict[str, Any]) -> tuple[OptimizerConfig, int] | None:
    """The optimizer section and run length a checkpoint's config recorded; None when it recorded none (a
    checkpoint from before configs were kept) or one this version cannot read."""
    try:
        fields = OptimizerConfig.model_fields
        optimizer = {k: v for k, v in saved.get("optimizer", {}).items() if k in fields}
        return OptimizerConfig.model_validate(optimizer), int(saved["trainer"]["num_train_steps"])
    except (KeyError, TypeError, ValueError, ValidationError):
        return None


def _with_phases(config: RunConfig, phases: list[SchedulePhase]) -> RunConfig:
    optimizer = config.optimizer.model_copy(update={"phases": list(phases)})
    return config.model_copy(update={"optimizer": optimizer})


def _how(choice: str, optimizer: OptimizerConfig, step: int, steps: int) -> str:
    """What an extension does, in words."""
    if choice == "tail":
        return "the old schedule, then its floor"
    if choice == "decay":
        peak = optimizer.learning_rate
        floor = peak * optimizer.min_lr_ratio
        return (
            f"a new phase over steps {step}-{steps - 1}: warmup back to {peak:.2e}, then "
            f"{optimizer.schedule} to {floor:.2e}"
        )
    return f"the {optimizer.schedule} schedule recomputed over {steps} steps"


def _jump(config: RunConfig, old_steps: int, step: int, was: float, stretched: float) -> str:
    """The refusal of an extension that would move the rate: the jump, and what each choice gives."""
    optimizer, steps = config.optimizer, config.trainer.num_train_steps
    peak, kind = optimizer.learning_rate, optimizer.schedule
    return (
        f"trainer.num_train_steps {steps}: the checkpoint at step {step} was trained for {old_steps} steps, "
        f"and its {kind} schedule recomputed over {steps} steps moves the learning rate at step {step} from "
        f"{was:.2e} to {stretched:.2e}. Say how the schedule goes on: --optimizer.extension tail (the old "
        f"schedule, {was:.2e} at step {step}, then its floor), decay (a new phase over steps {step}-"
        f"{steps - 1}: warmup from {was:.2e} back to {peak:.2e}, then {kind} to the floor) or restretch "
        f"(the jump). A wsd schedule (optimizer.schedule: wsd, as configs/marin_8b.yaml has) extended "
        "during its stable phase goes on without one."
    )
