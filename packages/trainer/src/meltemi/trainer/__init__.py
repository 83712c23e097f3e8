"""meltemi.trainer: a reproducible, config-driven Llama pretraining loop composed from the Meltemi libraries.

>>> from meltemi.trainer import load_config
>>> load_config(None, ["--trainer.num_train_steps", "10"]).trainer.num_train_steps
10
"""

from meltemi.trainer.config import (
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    RunConfig,
    TrainerConfig,
)
from meltemi.trainer.config_io import dump_config, load_config
from meltemi.trainer.errors import ConfigError, DataError, MeshError, NonFiniteError, TrainerError
from meltemi.trainer.llama import Llama
from meltemi.trainer.mesh import MeshPlan
from meltemi.trainer.sharding_report import format_report, sharding_report
from meltemi.trainer.step import StepMetrics, TrainState, init_state, make_train_step
from meltemi.trainer.trainer import RunSummary, Trainer

__version__ = "0.1.0"

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
