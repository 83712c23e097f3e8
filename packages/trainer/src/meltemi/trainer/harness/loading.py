"""The harness loaded as its users need it: whether task data may come from the Hugging Face Hub decided
first (``hub``), then lm-eval imported with the modules that use it; on a machine without lm-eval, one error
saying what needed it and how to install it.

>>> import importlib.util
>>> try:
...     require_harness("apps/evaluate.py")
... except HarnessMissingError as error:  # without the eval group
...     assert importlib.util.find_spec("lm_eval") is None and INSTALL in str(error)
... else:
...     assert importlib.util.find_spec("lm_eval") is not None
"""

from __future__ import annotations

from meltemi.trainer.harness.errors import HarnessMissingError
from meltemi.trainer.harness.hub import hub_access

INSTALL = "pip install 'meltemi-trainer[eval]'"  # the extra that brings lm-eval (uv: uv pip install ...)


def require_harness(needed_by: str) -> None:
    """Decide the Hub's access for this process, then import lm-eval and the harness modules over it
    (``model``, ``runner``); a ``HarnessMissingError`` saying that ``needed_by`` needs it when it is
    missing."""
    hub_access()  # before lm-eval is imported: offline at once when the Hub cannot be reached
    try:
        import meltemi.trainer.harness.model
        import meltemi.trainer.harness.runner  # noqa: F401
    except ModuleNotFoundError as error:
        missing = (error.name or "lm_eval").split(".")[0]  # the package, not the submodule asked for
        raise HarnessMissingError(
            f"{needed_by} needs lm-evaluation-harness ({missing} is not installed): {INSTALL}"
        ) from None
