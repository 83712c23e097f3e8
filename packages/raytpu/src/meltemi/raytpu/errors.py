"""The errors raytpu raises on purpose, under one base class, so a caller can catch them all at once.

Arguments of the wrong type or value are ``TypeError`` and ``ValueError`` as usual, raised before anything
is claimed; everything that goes wrong once a job is under way (or could not get under way) is a
``RaytpuError``.

>>> issubclass(SliceJobError, RaytpuError) and issubclass(SlicesUnavailableError, RaytpuError)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from meltemi.raytpu.outcomes import Attempt


class RaytpuError(RuntimeError):
    """Base class: every error raytpu raises on purpose (beyond argument checks) is one of these."""


class NotConnectedError(RaytpuError):
    """``run_on_slices`` was called without a Ray connection (``ray.init`` or ``LocalSliceCluster`` first)."""


class NotInJobError(RaytpuError):
    """``current_host()`` was called outside a function that ``run_on_slices`` runs."""


class SlicesUnavailableError(RaytpuError):
    """Not even the smallest acceptable number of slices could be claimed in time."""


class SliceJobError(RaytpuError):
    """The job ran out of retries. ``attempts`` lists every attempt; ``remote_traceback`` is the workload's
    own traceback from the last failure (also chained as ``__cause__``); ``workload_error`` is the exception
    the workload raised when the failure budget ran out (None when the preemption budget did), for a caller
    that wants to end with the workload's own error."""

    def __init__(
        self,
        reason: str,
        attempts: Sequence[Attempt],
        remote_traceback: str | None,
        workload_error: BaseException | None = None,
    ) -> None:
        self.attempts = tuple(attempts)
        self.remote_traceback = remote_traceback
        self.workload_error = workload_error
        lines = [reason, *(f"  {a.summary()}" for a in attempts)]
        if remote_traceback:
            lines += ["last traceback from the workload:", remote_traceback.rstrip()]
        super().__init__("\n".join(lines))
