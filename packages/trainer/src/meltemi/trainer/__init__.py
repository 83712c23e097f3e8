"""meltemi.trainer: a reproducible, config-driven Llama pretraining loop composed from the Meltemi libraries.

Importing the package loads nothing heavy: each public name is imported from its module on first use, so
``python -m meltemi.trainer --help``, the apps' error paths and ``meltemi.trainer.errors`` start without
JAX.

>>> from meltemi.trainer import load_config
>>> load_config(None, ["--trainer.num_train_steps", "10"]).trainer.num_train_steps
10
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

__version__ = importlib.metadata.version("meltemi-trainer")

if TYPE_CHECKING:
    from meltemi.trainer.config import DataConfig, ModelConfig, OptimizerConfig, RunConfig, TrainerConfig
    from meltemi.trainer.config_io import dump_config, load_config
    from meltemi.trainer.errors import ConfigError, DataError, MeshError, NonFiniteError, TrainerError
    from meltemi.trainer.model.llama import Llama
    from meltemi.trainer.plan.sharding_table import format_report, sharding_report
    from meltemi.trainer.run.summary import RunSummary
    from meltemi.trainer.step.mesh import MeshPlan
    from meltemi.trainer.step.train_step import StepMetrics, TrainState, init_state, make_train_step
    from meltemi.trainer.trainer import Trainer

# Each public name and the module that defines it. No module is named like a name it defines: importing
# such a module would make the package attribute the module instead of the function.
_HOMES = {
    "meltemi.trainer.config": ("DataConfig", "ModelConfig", "OptimizerConfig", "RunConfig", "TrainerConfig"),
    "meltemi.trainer.config_io": ("dump_config", "load_config"),
    "meltemi.trainer.errors": ("ConfigError", "DataError", "MeshError", "NonFiniteError", "TrainerError"),
    "meltemi.trainer.model.llama": ("Llama",),
    "meltemi.trainer.step.mesh": ("MeshPlan",),
    "meltemi.trainer.plan.sharding_table": ("format_report", "sharding_report"),
    "meltemi.trainer.step.train_step": ("StepMetrics", "TrainState", "init_state", "make_train_step"),
    "meltemi.trainer.run.summary": ("RunSummary",),
    "meltemi.trainer.trainer": ("Trainer",),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "ConfigError",
    "DataConfig",
    "DataError",
    "Llama",
    "MeshError",
    "MeshPlan",
    "ModelConfig",
    "NonFiniteError",
    "OptimizerConfig",
    "RunConfig",
    "RunSummary",
    "StepMetrics",
    "TrainState",
    "Trainer",
    "TrainerConfig",
    "TrainerError",
    "dump_config",
    "format_report",
    "init_state",
    "load_config",
    "make_train_step",
    "sharding_report",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'meltemi.trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
