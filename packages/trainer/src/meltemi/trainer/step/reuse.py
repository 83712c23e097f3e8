"""The programs of a config on a mesh, kept for the life of the process: a second run of the same config in
one process (a notebook's, a sweep's, an app that trains and then evaluates) reuses the jitted train step,
eval step and initialization, which JAX then neither traces, lowers nor compiles again.

A program's key is everything its trace may read: the config's JSON (frozen, so that is its value) less
the fields no program reads (``NOT_READ``: where the data, the base and the run's files are, and what the
run logs, keeps and reports, so runs of one model on other data or directories share their programs) and,
but for the schedule's own program, the schedule's (``SCHEDULE``: the run's length and rates, which the train
step takes as values), the mesh and both axis mappings, and what the program adds (a batch size, a z-loss
weight). A field not named there is part of the key, so a new one is safe by default;
tests/test_tr_program_reuse.py lowers every program with all of them changed and finds the same text.
JAX's own caches take it from there, keyed on the abstract arguments and its configuration, so a changed
``jax.config`` still retraces. The newest few programs are kept (``ProgramCache.size``), so a long-lived
process does not hold every executable it ever made.

>>> cache = ProgramCache(size=2)
>>> built = []
>>> make = lambda: built.append(1) or (lambda x: x)
>>> first = cache.get(("step", 1), make)
>>> cache.get(("step", 1), make) is first, len(built)
(True, 1)
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable
from typing import TypeVar

from meltemi.trainer.config import RunConfig
from meltemi.trainer.step.mesh import MeshPlan

Program = TypeVar("Program")


class ProgramCache:
    """The ``size`` most recently used programs, by key."""

    def __init__(self, size: int):
        self.size = size
        self._programs: collections.OrderedDict[Hashable, object] = collections.OrderedDict()

    def get(self, key: Hashable, build: Callable[[], Program]) -> Program:
        """The program kept under ``key``, else ``build()``'s, kept."""
        if key in self._programs:
            self._programs.move_to_end(key)
        else:
            self._programs[key] = build()
            while len(self._programs) > self.size:
                self._programs.popitem(last=False)
        return self._programs[key]  # type: ignore[return-value]


PROGRAMS = ProgramCache(size=16)
"""The process's programs: a run keeps four or five (train and eval steps, initialization, state shapes)."""


NOT_READ: dict[str, set[str]] = {
    "data": {"tokenizer", "stores", "corpus", "rebuild_corpus", "cache_dir", "sources", "eval_sets",
             "stages", "eval_fraction", "held_out", "mixture_block_size", "text_field", "skip_bad_lines",
             "invalid_utf8", "chat", "reset_positions"},
    "trainer": {"log_every", "eval_every", "eval_batches", "export_every", "export_dtype", "checkpoint_every",
                "checkpoint_every_minutes", "keep_every", "keep_last", "initialize_from", "nan_policy",
                "profiler", "plots", "log_batch_hashes", "trackers", "sample_prompt", "reply_to",
                "compile_cache", "compile_cache_dir", "compile_cache_mirror"},
}  # fmt: skip
"""The config's fields no program reads: the data's files and how rows are drawn (the programs see batches),
the base a run starts from (they see its state), and what a run logs, keeps and reports."""


STEP_SCHEDULE = "step schedule"
"""The kind of the one program that reads the schedule: what it gives a step (``train_step.StepSchedule``:
the learning rate, whether the watched norms are due), which the train step takes as an argument."""

SCHEDULE: dict[str, set[str]] = {
    "optimizer": {"learning_rate", "schedule", "warmup_steps", "decay_steps", "min_lr_ratio", "extension",
                  "phases", "segments"},
    "trainer": {"num_train_steps"},
}  # fmt: skip
"""The schedule's fields, read only by the ``STEP_SCHEDULE`` program: runs of one model that differ in their
length or their rates share every other program (a resumed run made longer compiles no new step)."""


def program_key(kind: str, config: RunConfig, plan: MeshPlan, *extra: Hashable) -> tuple:
    """What a program of ``kind`` for ``config`` on ``plan`` is kept under (``extra``: what else its trace
    reads)."""
    mappings = tuple(repr(sorted(m.items())) for m in (plan.parameter_mapping, plan.compute_mapping))
    return (kind, config.model_dump_json(exclude=not_read(kind)), plan.mesh, *mappings, *extra)


def not_read(kind: str) -> dict[str, set[str]]:
    """The config's fields a program of ``kind`` does not read: ``NOT_READ``, and the schedule's unless it is
    the ``STEP_SCHEDULE`` program (a train step kept under any other kind is given its schedule: called
    without one, ``make_train_step``'s step computes it itself).

    >>> sorted(not_read("eval step")["optimizer"])[:2], "optimizer" in not_read(STEP_SCHEDULE)
    (['decay_steps', 'extension'], False)
    """
    if kind == STEP_SCHEDULE:
        return NOT_READ
    return {
        **NOT_READ,
        "optimizer": SCHEDULE["optimizer"],
        "trainer": NOT_READ["trainer"] | SCHEDULE["trainer"],
    }
