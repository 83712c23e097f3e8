"""Running harness tasks on a model: tasks by name (the shipped ones in ``tasks/`` among them) or by the path
of a task YAML, each loaded on its own so that an unknown name, or data that is not on this machine, is one
line naming that task; then the harness's results, its table, and ``eval/<task>/<metric>`` metrics.

The shipped tasks are found without indexing the harness's own thousands of task files, so asking only
for them (or for YAML paths) starts in a second; so is a name that none of those files mentions (a typo),
which the index could not hold.

>>> sorted(shipped_tasks())
['stdlib_files', 'stdlib_next_line', 'stdlib_return', 'stdlib_return_gen']
>>> flat_metrics({"results": {"t": {"alias": "t", "acc,none": 0.5, "acc_stderr,none": 0.1}}})
{'eval/t/acc': 0.5}
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lm_eval.tasks
import numpy as np
import yaml
from lm_eval.api.model import LM
from lm_eval.evaluator import evaluate
from lm_eval.tasks import TaskManager
from lm_eval.utils import handle_non_serializable, make_table

from meltemi.trainer.config import EvalTask
from meltemi.trainer.harness import SHIPPED_TAG
from meltemi.trainer.harness.errors import EvalError, MissingTaskDataError, UnknownTaskError
from meltemi.trainer.harness.hub import decided_hub_access

SHIPPED_DIR = Path(__file__).resolve().parent / "tasks"


class _WithoutMetadataAdvice(logging.Filter):
    """Drops the harness's advice to pass ``--metadata`` on its own command line, which it logs for every
    task read by a loader (each shipped task, at every run): neither this module nor the apps take it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed to `--metadata`" not in record.getMessage()


logging.getLogger("lm_eval.api.task").addFilter(_WithoutMetadataAdvice())


@dataclasses.dataclass(frozen=True)
class EvalResults:
    """The harness's results (what ``lm_eval`` writes as JSON), its table, and the metrics to log."""

    results: dict[str, Any]
    metrics: dict[str, float]

    def table(self) -> str:
        tables = [make_table(self.results)]
        if self.results.get("groups"):
            tables.append(make_table(self.results, "groups"))
        return "\n".join(tables)

    def to_json(self) -> str:
        return json.dumps(self.results, indent=2, default=handle_non_serializable, ensure_ascii=False) + "\n"


def shipped_tasks() -> list[str]:
    """The names of the tasks that ship with the trainer (the ``meltemi_stdlib`` tag holds them all)."""
    return [yaml.load(p.read_text(), Loader=_NoFunctions)["task"] for p in sorted(SHIPPED_DIR.glob("*.yaml"))]


class _NoFunctions(yaml.SafeLoader):
    """A safe loader that reads the harness's ``!function`` tags as plain strings (never imports them)."""


_NoFunctions.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _needs_defaults(specs: Sequence[str]) -> list[str]:
    """The ``specs`` that are neither shipped tasks (or their tag) nor task YAML files."""
    shipped = {*shipped_tasks(), SHIPPED_TAG}
    return [spec for spec in specs if spec not in shipped and not Path(spec).is_file()]


def task_manager(specs: Sequence[str]) -> TaskManager:
    """A ``TaskManager`` that knows the shipped tasks, and the harness's own only if ``specs`` need them."""
    return TaskManager(include_path=str(SHIPPED_DIR), include_defaults=bool(_needs_defaults(specs)))


def unmentioned(names: Sequence[str], root: Path | None = None) -> list[str]:
    """The ``names`` that no file under ``root`` (the harness's own tasks by default) contains as text.

    The harness indexes a task, group or tag under the name its YAML gives, or a template the YAML includes
    gives (templates need not end in ``.yaml``), so a name missing from every file's text cannot be in its
    index; reading the files' bytes takes a quarter of a CPU-second where indexing them (parsing every
    YAML) takes about seven.

    >>> unmentioned(["arc_easy", "arc_eassy"])
    ['arc_eassy']
    """
    missing = {name: name.encode() for name in names}
    for directory, subdirectories, files in os.walk(root or Path(lm_eval.tasks.__file__).parent):
        subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
        for file in files:
            if not missing:
                return []
            text = (Path(directory) / file).read_bytes()
            missing = {name: raw for name, raw in missing.items() if raw not in text}
    return [name for name in names if name in missing]


def _unknown(spec: str) -> UnknownTaskError:
    return UnknownTaskError(
        f"unknown task {spec!r}: not a task, group or tag the harness knows, nor a task YAML file"
    )


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def load_tasks(specs: Sequence[str | EvalTask], manager: TaskManager) -> list:
    """The harness's task and group objects for ``specs``, each built (and its data read) on its own, with
    its shot count and under its alias when it has them (``EvalTask``; ``NAME:SHOTS`` gives the count)."""
    if not specs:
        raise UnknownTaskError("no task given: name at least one task, group, tag or task YAML file")
    top = []
    for asked in map(EvalTask.of, specs):
        spec = asked.name
        try:
            loaded = manager.load([spec])
        except KeyError:
            raise _unknown(spec) from None
        except OSError as error:  # a missing file, or a data set that is not cached and cannot be fetched
            name = error.filename if isinstance(error, FileNotFoundError) and error.filename else None
            detail = f"{name} does not exist" if name else _one_line(error)
            access = decided_hub_access()  # a data set the Hub was not asked for: why
            if isinstance(error, ConnectionError) and access is not None and not access.online:
                detail += f"; offline: {access.reason}"
            raise MissingTaskDataError(f"task {spec!r}: its data is not on this machine: {detail}") from None
        groups, tasks = loaded.get("groups", {}), loaded["tasks"]
        children = {child for names in loaded.get("group_map", {}).values() for child in names}
        grouped = {task.task_name for group in groups.values() for task in group.get_all_tasks()}
        mine = [group for name, group in groups.items() if name not in children]
        mine += [task for name, task in tasks.items() if name not in grouped]
        top += _as_asked(asked, mine)
    return top


def _as_asked(asked: EvalTask, loaded: list) -> list:
    """The task and group objects ``loaded`` for ``asked``, given its shot count (every task of a group or a
    tag: lm-eval's ``--num_fewshot``) and its alias (a single task's name, so one task can run twice)."""
    leaves = [task for item in loaded for task in (item.get_all_tasks() if hasattr(item, "get_all_tasks")
                                                   else [item])]  # fmt: skip
    if asked.num_fewshot is not None:
        for task in leaves:
            task.set_config(key="num_fewshot", value=asked.num_fewshot)
    if asked.alias is not None:
        if len(loaded) != 1 or len(leaves) != 1 or loaded[0] is not leaves[0]:
            raise EvalError(
                f"task {asked.name!r}: a group or tag of {len(leaves)} tasks has no alias (an alias renames "
                "one task); name its tasks one by one"
            )
        leaves[0].set_config(key="task", value=asked.alias)
    return loaded


def flat_metrics(results: dict[str, Any]) -> dict[str, float]:
    """Every task's and group's numeric metric as ``eval/<task>/<metric>`` (``<metric>_<filter>`` for a
    filter other than ``none``), standard errors left out."""
    metrics = {}
    for section in ("results", "groups"):
        for task, values in results.get(section, {}).items():
            for key, value in values.items():
                metric, _, filter_name = key.partition(",")
                if not filter_name or metric.endswith("_stderr") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float) and math.isfinite(value):
                    suffix = "" if filter_name == "none" else f"_{filter_name}"
                    metrics[f"eval/{task}/{metric}{suffix}"] = float(value)
    return metrics


def run_tasks(
    lm: LM,
    specs: Sequence[str],
    *,
    limit: int | float | None = None,
    bootstrap_iters: int = 1000,
    seed: int = 0,
    quiet: bool = False,
) -> EvalResults:
    """Evaluate ``lm`` on ``specs`` (task, group or tag names, or task YAML paths), at most ``limit``
    documents per task; ``bootstrap_iters`` resamples give the standard errors that need them."""
    tasks = PreparedTasks.of(specs)
    return tasks.run(lm, limit=limit, bootstrap_iters=bootstrap_iters, seed=seed, quiet=quiet)


@dataclasses.dataclass(frozen=True)
class PreparedTasks:
    """Tasks built and their data read, ready to run on any model (so bad task names fail first, before a
    checkpoint is read, and the training loop builds its tasks once)."""

    manager: TaskManager
    tasks: list

    @staticmethod
    def of(specs: Sequence[str | EvalTask]) -> PreparedTasks:
        """``specs`` (names, ``NAME:SHOTS``, or ``EvalTask``s) built, each with its shot count and alias."""
        names = [EvalTask.of(spec).name for spec in specs]
        if typos := unmentioned([name for name in _needs_defaults(names) if name]):
            raise _unknown(typos[0])  # before the harness indexes its thousands of files for nothing
        manager = task_manager(names)
        return PreparedTasks(manager, load_tasks(specs, manager))

    def run(
        self,
        lm: LM,
        *,
        limit: int | float | None = None,
        bootstrap_iters: int = 1000,
        seed: int = 0,
        quiet: bool = False,
        apply_chat_template: bool = False,
        system_instruction: str | None = None,
        fewshot_as_multiturn: bool = False,
    ) -> EvalResults:
        """Evaluate ``lm`` on these tasks (see ``run_tasks``); with ``apply_chat_template`` each prompt is
        rendered by the model's chat template (after ``system_instruction``, few-shot examples as turns
        with ``fewshot_as_multiturn``), as ``lm_eval --apply_chat_template`` does.

        The harness's ``evaluate``, with the tasks prepared as its ``simple_evaluate`` prepares them (the
        seeds; zero-shot unless a task says otherwise; the few-shot seed) and the run's settings recorded
        under ``config``. ``simple_evaluate`` would also record the machine's environment, which imports
        torch into this JAX process to collect it (1.4 to 2.3 CPU-seconds at every start).
        """
        if quiet:
            logging.getLogger("lm_eval").setLevel(logging.WARNING)
        random.seed(seed)
        np.random.seed(seed)
        loaded = self.manager.load(list(self.tasks))
        for task in loaded["tasks"].values():
            if task.get_config("num_fewshot") is None:
                task.set_config(key="num_fewshot", value=0)
            task.set_fewshot_seed(seed=seed)
        chat = {
            "apply_chat_template": apply_chat_template,
            "system_instruction": system_instruction,
            "fewshot_as_multiturn": fewshot_as_multiturn,
        }
        results = dict(
            evaluate(
                lm=lm,
                task_dict=loaded,
                limit=limit,
                bootstrap_iters=bootstrap_iters,
                log_samples=False,
                **chat,
            )
        )
        info = lm.get_model_info() if hasattr(lm, "get_model_info") else {}
        results["config"] = {"model": type(lm).__name__, **info, "limit": limit,
                             "bootstrap_iters": bootstrap_iters, "random_seed": seed, "numpy_seed": seed,
                             "fewshot_seed": seed, **chat}  # fmt: skip
        results["date"] = time.time()
        results["lm_eval_version"] = importlib.metadata.version("lm_eval")
        return EvalResults(results, flat_metrics(results))
