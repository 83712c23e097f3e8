"""``run_on_slices``: one JAX job over many preemptible slices, retried until it finishes or gives up."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import ray

from meltemi.raytpu.claims import SliceClaim, claim_slices, intact_slices, release
from meltemi.raytpu.errors import NotConnectedError, SliceJobError, SlicesUnavailableError
from meltemi.raytpu.events import EventLog, StatusLine, status_text
from meltemi.raytpu.host_env import RESERVED_PREFIXES, host_envs
from meltemi.raytpu.hosts import coordinator_endpoint, host_task_options, run_host
from meltemi.raytpu.inventory import SliceInfo
from meltemi.raytpu.outcomes import (
    Attempt,
    Cause,
    classify,
    counts,
    remote_traceback,
    short_detail,
    workload_exception,
)
from meltemi.raytpu.slices import SliceType
from meltemi.raytpu.slices import slice_type as parse_slice_type

T = TypeVar("T")
PreemptionCheck = Callable[[SliceInfo], bool]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How often each kind of trouble may be retried, and how long to wait before the next attempt.

    The wait doubles with every retry of the same cause, from ``backoff_s`` up to ``max_backoff_s``.
    Pass one to ``run_on_slices(..., retry=...)``.

    >>> policy = RetryPolicy(max_retries_preemption=10, max_retries_failure=2, backoff_s=1.0)
    >>> policy.budget("failure"), [policy.delay(n) for n in (1, 2, 3)]
    (2, [1.0, 2.0, 4.0])
    """

    max_retries_preemption: int
    max_retries_failure: int
    backoff_s: float = 5.0
    max_backoff_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_retries_preemption", "max_retries_failure"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if not 0 <= self.backoff_s <= self.max_backoff_s:
            raise ValueError(
                f"need 0 <= backoff_s <= max_backoff_s, got {self.backoff_s} and {self.max_backoff_s}"
            )

    def budget(self, cause: Cause) -> int:
        return self.max_retries_preemption if cause == "preemption" else self.max_retries_failure

    def delay(self, retry_number: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** max(0, retry_number - 1))


@dataclasses.dataclass
class _Ended:
    cause: Cause
    slice_name: str
    host_id: int | None
    detail: str
    error: BaseException | None = None


def run_on_slices(
    fn: Callable[[], T],
    *,
    slice_type: str | SliceType,
    num_slices: int | Sequence[int],
    retry: RetryPolicy | None = None,
    max_retries_preemption: int | None = None,
    max_retries_failure: int | None = None,
    backoff_s: float | None = None,
    max_backoff_s: float | None = None,
    env: Mapping[str, str] | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    preemption_check: PreemptionCheck | None = None,
    scale_up_interval_s: float | None = None,
    drain_timeout_s: float = 300.0,
    acquire_timeout_s: float = 600.0,
    claim_wait_s: float = 10.0,
    poll_interval_s: float = 1.0,
    event_log: EventLog | str | Callable[[str], None] | None = None,
    status: StatusLine | None = None,
    job_name: str | None = None,
) -> list[T]:
    """Run ``fn()`` on every host of ``num_slices`` slices and return each host's result, in process order.

    Each host runs ``fn`` with ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID`` (and
    ``MEGASCALE_*`` for several slices) set, so ``jax.distributed.initialize()`` works as is;
    ``current_host()`` reads the same facts back. When any host fails, every other host's task is cancelled,
    the slices are released, and the whole job runs again: a lost node or a positive ``preemption_check``
    spends the preemption budget, an exception from ``fn`` the failure budget. ``num_slices`` may list
    acceptable counts: the job starts on the most it can claim now and, every ``scale_up_interval_s``
    seconds, restarts on more when more are free (the workload resumes from its own checkpoint).

    A scale-up drains the running hosts instead of killing them: each host's task is interrupted the way
    Ray's non-forced cancel does it (its SIGINT handler runs in the task's main thread; without one, the
    task gets ``KeyboardInterrupt``), so a workload that handles SIGINT by checkpointing and returning
    loses no work. Hosts still running ``drain_timeout_s`` seconds later are killed.

    The retry budgets and backoff are a ``RetryPolicy``, given as ``retry=RetryPolicy(...)`` or, for short,
    as its fields (``max_retries_preemption`` and ``max_retries_failure``, optionally ``backoff_s`` and
    ``max_backoff_s``); giving both is an error.

    This example starts a Ray cluster, so the doctest run skips it (``+SKIP``); the README example and the
    cluster tests run the same thing:

    >>> from meltemi.raytpu import LocalSliceCluster, RetryPolicy, run_on_slices  # doctest: +SKIP
    >>> with LocalSliceCluster([("cpu-1", 1)]):  # doctest: +SKIP
    ...     run_on_slices(lambda: 42, slice_type="cpu-1", num_slices=1, retry=RetryPolicy(1, 0))
    [42]
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    kind = parse_slice_type(slice_type)
    acceptable = acceptable_slice_counts(num_slices)
    policy = retry_policy(retry, max_retries_preemption, max_retries_failure, backoff_s, max_backoff_s)
    environ = _checked_env(env)
    for name, value in (("acquire_timeout_s", acquire_timeout_s), ("claim_wait_s", claim_wait_s)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if poll_interval_s <= 0:
        raise ValueError(f"poll_interval_s must be positive, got {poll_interval_s}")
    if scale_up_interval_s is not None and scale_up_interval_s <= 0:
        raise ValueError(f"scale_up_interval_s must be positive or None, got {scale_up_interval_s}")
    if drain_timeout_s <= 0:
        raise ValueError(f"drain_timeout_s must be positive, got {drain_timeout_s}")
    if not ray.is_initialized():
        raise NotConnectedError(
            "run_on_slices needs a Ray connection: call ray.init(address=...) first "
            "(or use LocalSliceCluster to try it on this machine)"
        )
    name = job_name or f"job-{uuid.uuid4().hex[:8]}"
    job = _Job(
        fn=fn,
        kind=kind,
        acceptable=acceptable,
        policy=policy,
        environ=environ,
        runtime_env=runtime_env,
        preemption_check=preemption_check,
        scale_up_interval_s=scale_up_interval_s,
        drain_timeout_s=drain_timeout_s,
        poll_interval_s=poll_interval_s,
        name=name,
        log=event_log if isinstance(event_log, EventLog) else _event_log(event_log, name),
        line=status or StatusLine(),
    )
    try:
        return job.run(acquire_timeout_s, claim_wait_s)
    finally:
        job.line.close()


@dataclasses.dataclass
class _Job:
    fn: Callable[[], Any]
    kind: SliceType
    acceptable: list[int]
    policy: RetryPolicy
    environ: dict[str, str]
    runtime_env: Mapping[str, Any] | None
    preemption_check: PreemptionCheck | None
    scale_up_interval_s: float | None
    drain_timeout_s: float
    poll_interval_s: float
    name: str
    log: EventLog
    line: StatusLine
    attempts: list[Attempt] = dataclasses.field(default_factory=list)

    def run(self, acquire_timeout_s: float, claim_wait_s: float) -> list[Any]:
        while True:
            number = len(self.attempts)
            claims = _acquire(self, acquire_timeout_s, claim_wait_s, number)
            try:
                ended, results = self.attempt(claims, number)
            finally:
                release(claims)
            if ended is None:
                self.log.emit("finished", attempt=number, num_slices=len(claims))
                return results
            self.attempts.append(
                Attempt(number, len(claims), ended.cause, ended.slice_name, ended.host_id, ended.detail)
            )
            if ended.cause == "scale-up":
                self.log.emit("scaled", attempt=number, from_slices=len(claims), reason=ended.detail)
                continue
            used = counts(self.attempts, ended.cause)
            budget = self.policy.budget(ended.cause)
            if used > budget:
                self.log.emit("gave_up", attempt=number, cause=ended.cause, detail=ended.detail)
                raise SliceJobError(
                    f"job {self.name} gave up after {len(self.attempts)} attempt(s): {ended.cause} retries "
                    f"exhausted ({budget} allowed)",
                    self.attempts,
                    remote_traceback(ended.error) if ended.error is not None else None,
                    workload_exception(ended.error) if ended.cause == "failure" else None,
                ) from ended.error
            delay = self.policy.delay(used)
            self.log.emit("retry", attempt=number + 1, cause=ended.cause, retry=used, delay_s=delay)
            time.sleep(delay)

    def attempt(self, claims: list[SliceClaim], number: int) -> tuple[_Ended | None, list[Any]]:
        """Run one attempt on the claimed slices; ``(None, results)`` when every host finished."""
        kind, log = self.kind, self.log
        try:
            options = host_task_options(kind, claims[0], 0, self.runtime_env)
            coordinator = ray.get(coordinator_endpoint.options(**options).remote())
        except Exception as error:  # the probe ran on a host like any other, so it fails like one
            return _host_ended(error, claims[0], 0, log, number), []
        envs = host_envs(coordinator, [c.info.name for c in claims], kind.hosts, number)
        where = {}
        for e in envs:
            options = host_task_options(kind, claims[e.slice_id], e.host_id, self.runtime_env)
            where[run_host.options(**options).remote(self.fn, {**self.environ, **e.to_environ()})] = e
        results: dict[int, Any] = {}
        pending = list(where)
        interval = self.scale_up_interval_s if len(claims) < max(self.acceptable) else None
        next_scale_check = time.monotonic() + interval if interval else None
        while pending:
            self.line.show(self.status(number, len(claims), len(pending), len(results)))
            done, pending = ray.wait(pending, num_returns=1, timeout=self.poll_interval_s)
            for ref in done:
                host = where[ref]
                try:
                    results[host.process_id] = ray.get(ref)
                except Exception as error:
                    _cancel(pending)
                    return _host_ended(error, claims[host.slice_id], host.host_id, log, number), []
            ended = _check_preemption(self.preemption_check, claims, log, number)
            if ended is None and next_scale_check is not None and time.monotonic() >= next_scale_check:
                ended = _check_scale_up(kind, self.acceptable, len(claims))
                next_scale_check = time.monotonic() + interval
                if ended is not None:
                    self.drain(pending, number)
                    return ended, []
            if ended is not None:
                _cancel(pending)
                return ended, []
        return None, [results[i] for i in range(len(envs))]

    def drain(self, running: list[ray.ObjectRef], number: int) -> None:
        """Interrupt every running host and wait for them to end on their own; kill what outlasts the wait."""
        started = time.monotonic()
        for ref in running:
            ray.cancel(ref, force=False)
        pending, deadline = list(running), started + self.drain_timeout_s
        while pending and time.monotonic() < deadline:
            self.line.show(f"{self.name}: draining {len(pending)} host(s) before scaling up")
            _, pending = ray.wait(
                pending,
                num_returns=len(pending),
                timeout=max(0.0, min(self.poll_interval_s, deadline - time.monotonic())),
            )
        _cancel(pending)
        self.log.emit(
            "drained", attempt=number, hosts=len(running), killed=len(pending),
            seconds=round(time.monotonic() - started, 3),
        )  # fmt: skip

    def status(self, number: int, num_slices: int, running: int, done: int) -> str:
        return status_text(
            job=self.name,
            slice_type=self.kind.name,
            attempt=number,
            num_slices=num_slices,
            running=running,
            done=done,
            preemptions=(counts(self.attempts, "preemption"), self.policy.max_retries_preemption),
            failures=(counts(self.attempts, "failure"), self.policy.max_retries_failure),
        )


def retry_policy(
    retry: RetryPolicy | None,
    max_retries_preemption: int | None,
    max_retries_failure: int | None,
    backoff_s: float | None,
    max_backoff_s: float | None,
) -> RetryPolicy:
    """``retry`` itself, or the policy its fields spell out as separate keywords (never both).

    >>> retry_policy(None, 3, 1, None, None) == RetryPolicy(3, 1)
    True
    """
    fields = {
        "max_retries_preemption": max_retries_preemption,
        "max_retries_failure": max_retries_failure,
        "backoff_s": backoff_s,
        "max_backoff_s": max_backoff_s,
    }
    given = {name: value for name, value in fields.items() if value is not None}
    if retry is not None:
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        if given:
            raise TypeError(
                f"run_on_slices got retry= and also {', '.join(given)}: pass the policy alone "
                "(RetryPolicy holds every retry setting)"
            )
        return retry
    missing = [name for name in ("max_retries_preemption", "max_retries_failure") if name not in given]
    if missing:
        raise TypeError(
            "run_on_slices needs retry=RetryPolicy(...) or both retry budgets; "
            f"missing {' and '.join(missing)}"
        )
    return RetryPolicy(**given)


def acceptable_slice_counts(num_slices: int | Sequence[int]) -> list[int]:
    """The sorted, distinct slice counts a job accepts.

    >>> acceptable_slice_counts([4, 2, 4])
    [2, 4]
    """
    values = [num_slices] if isinstance(num_slices, int) else list(num_slices)
    if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
        raise ValueError(f"num_slices must be a positive int or a non-empty list of them, got {num_slices!r}")
    return sorted(set(values))


def _checked_env(env: Mapping[str, str] | None) -> dict[str, str]:
    environ = dict(env or {})
    for key, value in environ.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str; {key!r} maps to {type(value).__name__}")
        if key.startswith(RESERVED_PREFIXES):
            raise ValueError(f"env may not set {key!r}: run_on_slices sets it for each host")
    return environ


def _acquire(job: _Job, timeout_s: float, wait_s: float, attempt: int) -> list[SliceClaim]:
    deadline = time.monotonic() + timeout_s
    while True:
        claims = claim_slices(job.kind, job.acceptable, job_name=job.name, wait_s=min(wait_s, timeout_s))
        if claims:
            for slice_id, claim in enumerate(claims):
                job.log.emit("slice_acquired", attempt=attempt, slice=claim.info.name, slice_id=slice_id)
            return claims
        if time.monotonic() >= deadline:
            have = len(intact_slices(job.kind))
            raise SlicesUnavailableError(
                f"could not claim {job.acceptable[0]} {job.kind.name} slice(s) within {timeout_s:g}s "
                f"({have} intact slice(s) of that type in the cluster, some may be in use)"
            )
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _host_ended(error: BaseException, claim: SliceClaim, host_id: int, log: EventLog, attempt: int) -> _Ended:
    node_id = claim.info.hosts[host_id].node_id
    cause = classify(error, node_alive=_node_alive(node_id))
    detail = short_detail(error)
    event = "slice_lost" if cause == "preemption" else "host_failed"
    log.emit(event, attempt=attempt, slice=claim.info.name, host=host_id, node=node_id, detail=detail)
    return _Ended(cause, claim.info.name, host_id, detail, error)


def _check_preemption(
    check: PreemptionCheck | None, claims: list[SliceClaim], log: EventLog, attempt: int
) -> _Ended | None:
    if check is None:
        return None
    for claim in claims:
        if check(claim.info):
            log.emit("slice_lost", attempt=attempt, slice=claim.info.name, detail="preemption signal")
            return _Ended("preemption", claim.info.name, None, "preemption signal")
    return None


def _check_scale_up(kind: SliceType, acceptable: list[int], current: int) -> _Ended | None:
    free = len(intact_slices(kind)) - current  # intact slices other than ours...
    if kind.head_resource is not None:  # ...of which only those whose head nobody holds
        free = min(free, int(ray.available_resources().get(kind.head_resource, 0)))
    better = [c for c in acceptable if current < c <= current + free]
    if not better:
        return None
    return _Ended("scale-up", "-", None, f"{free} more slice(s) free; restarting on {max(better)}")


def _cancel(refs: Sequence[ray.ObjectRef]) -> None:
    for ref in refs:
        ray.cancel(ref, force=True)


def _node_alive(node_id: str) -> bool:
    return any(node["NodeID"] == node_id and node.get("Alive") for node in ray.nodes())


def _event_log(where: str | Callable[[str], None] | None, job: str) -> EventLog:
    """The job's event log: to a file path, or to a callable that takes each line."""
    return EventLog(sink=where, job=job) if callable(where) else EventLog(where, job=job)
