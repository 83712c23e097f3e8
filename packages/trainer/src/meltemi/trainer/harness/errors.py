"""The errors a user can cause when evaluating with the harness: each one line naming what and where."""

from meltemi.trainer.errors import TrainerError


class EvalError(TrainerError):
    """Base class of the harness's errors: a request, setting or checkpoint it cannot evaluate."""


class UnknownTaskError(EvalError):
    """A task name that is neither a harness task, group or tag, nor a task YAML file."""


class MissingTaskDataError(EvalError):
    """A task whose data set is not on this machine (and cannot be downloaded)."""


class NoTokenizerError(EvalError):
    """A checkpoint whose config names no tokenizer (or one that cannot be read) to turn text into tokens."""


class HarnessMissingError(EvalError):
    """lm-evaluation-harness is not installed (the ``meltemi-trainer[eval]`` extra)."""


class ResultsFileError(EvalError):
    """``--out`` names no file, a directory, or a file that exists (whose results would be lost)."""
