"""The errors a user of the trainer can cause, each one line that says what is wrong and where."""


class TrainerError(Exception):
    """Base class: every error the trainer raises on purpose is one of these."""


class ConfigError(TrainerError):
    """A config file, key, value or override is invalid (the message names the field)."""


class DataError(TrainerError):
    """The token stores do not fit the config (vocabulary, sequence length, held-out split, stages)."""


class MeshError(TrainerError):
    """The mesh does not fit the devices, the batch or the model's axes (the message names the field)."""


class NonFiniteError(TrainerError):
    """The loss or the gradient went NaN or infinite and ``trainer.nan_policy`` is ``stop``."""


class CheckpointError(TrainerError):
    """A checkpoint is incomplete, damaged, or does not fit the config (the message names it)."""


class HostMemoryError(TrainerError):
    """On a CPU, a train step or a model larger than the memory the machine has (the message says by how
    much, and how to fit)."""
