"""Why an attempt ended: a preemption (run again) or a failure of the workload (maybe a bug).

A lost node, a lost actor or worker on a dead node, or a preemption signal is a *preemption*: the slice was
taken away and the job should simply run again. An exception raised by the workload is a *failure*: it may
be a bug, so it has its own (usually smaller) retry budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Literal

from ray import exceptions as rex

Cause = Literal["preemption", "failure", "scale-up"]

_LOST_HOST_ERRORS = (
    rex.NodeDiedError,
    rex.LocalRayletDiedError,
    rex.RayActorError,
    rex.ObjectLostError,
    rex.TaskUnschedulableError,
    rex.TaskPlacementGroupRemoved,
    rex.ActorPlacementGroupRemoved,
    rex.TaskCancelledError,
)


def classify(error: BaseException, node_alive: bool) -> Cause:
    """``"failure"`` when the workload raised, ``"preemption"`` when its host (or worker) went away.

    A crashed worker process is a preemption when its node died with it, and a failure (the workload
    crashed its own process) when the node is still alive.

    >>> classify(ValueError("bad batch"), node_alive=True)
    'failure'
    >>> classify(rex.NodeDiedError("gone"), node_alive=False)
    'preemption'
    """
    if isinstance(error, rex.RayTaskError):
        return "failure"
    if isinstance(error, rex.WorkerCrashedError):
        return "failure" if node_alive else "preemption"
    if isinstance(error, _LOST_HOST_ERRORS):
        return "preemption"
    return "failure"


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt that did not finish: where it broke and why."""

    number: int
    num_slices: int
    cause: Cause
    slice_name: str
    host_id: int | None
    detail: str

    def summary(self) -> str:
        where = f"slice {self.slice_name}" + (f" host {self.host_id}" if self.host_id is not None else "")
        return f"attempt {self.number} on {self.num_slices} slice(s): {self.cause} at {where}: {self.detail}"


def short_detail(error: BaseException, limit: int = 200) -> str:
    """The first line of an error, for attempt summaries and the event log."""
    cause = error.cause if isinstance(error, rex.RayTaskError) and error.cause is not None else error
    first = (str(cause).strip().splitlines() or [""])[0]
    text = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def remote_traceback(error: BaseException) -> str | None:
    """The workload's traceback as the worker printed it, when Ray carried one back.

    What ``ray.get`` raises is a copy that subclasses both ``RayTaskError`` and the workload's exception
    type; its text is the remote traceback.
    """
    if not isinstance(error, rex.RayTaskError):
        return None
    return getattr(error, "traceback_str", None) or str(error)


def workload_exception(error: BaseException | None) -> BaseException | None:
    """The exception the workload itself raised, out of Ray's wrapper; None when there is none.

    >>> workload_exception(ValueError("bad batch"))
    ValueError('bad batch')
    """
    if isinstance(error, rex.RayTaskError):
        return error.cause
    return error


def counts(attempts: Collection[Attempt], cause: Cause) -> int:
    return sum(1 for a in attempts if a.cause == cause)
