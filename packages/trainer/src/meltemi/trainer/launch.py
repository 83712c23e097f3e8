"""Training across slices on Ray (`pip install meltemi-trainer[ray]`): a process per host, one global mesh.

``train_on_slices`` runs :func:`train_on_this_host` on every host of ``slices`` slices through
``meltemi.raytpu.run_on_slices``. Each host joins the JAX job from the environment raytpu gives it, reads its
own rows, writes its own checkpoint shards, and resumes from the run directory's latest good checkpoint, so
when raytpu restarts the job after a lost host (a preemption) the run continues where it left off. The run
directory must be storage every host sees (one machine's disk for a local cluster, a shared file system for
a real one). With ``min_slices`` the job starts on as many slices as it can claim (at least that many) and
grows when more come back: every ``scale_up_interval_s`` raytpu looks for free slices and, when there are,
interrupts the hosts, which stop as at Ctrl-C (a checkpoint at the next step boundary, agreed between the
processes) before the job restarts on more. The data order does not depend on the number of processes.

A failure in the workload spends ``max_retries_failure``; when that runs out, ``train_on_slices`` raises the
workload's own error (a ``ConfigError`` stays a ``ConfigError``), with raytpu's account of the attempts
chained to it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from meltemi.trainer.command import LaunchFlags
from meltemi.trainer.config import RunConfig
from meltemi.trainer.run_directory import RunDirectory

if TYPE_CHECKING:
    from meltemi.trainer.run.summary import RunSummary


@dataclasses.dataclass(frozen=True)
class HostResult:
    """What one host reports when the run ends: its place in the job and the run's summary as it saw it."""

    process_index: int
    process_count: int
    summary: RunSummary

    @property
    def steps(self) -> int:
        return self.summary.steps

    @property
    def stopped_by(self) -> str | None:
        return self.summary.stopped_by


@dataclasses.dataclass(frozen=True)
class SliceLaunch:
    """Where and how widely to run: ``slices`` of ``slice_type`` (``cpu-<hosts>`` are fake CPU slices, each
    host with ``devices_per_host`` fake devices), at least ``min_slices`` of them, on the Ray cluster at
    ``address`` (None: the one this process is connected to). With fewer slices than asked for, every
    ``scale_up_interval_s`` it looks for more; hosts that have not checkpointed and returned
    ``drain_timeout_s`` after being asked to are killed."""

    slice_type: str
    slices: int
    min_slices: int | None = None
    devices_per_host: int = 4
    max_retries_preemption: int = 5
    max_retries_failure: int = 0
    scale_up_interval_s: float = 300.0
    drain_timeout_s: float = 600.0
    acquire_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("slices", "devices_per_host"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.min_slices is not None and not 1 <= self.min_slices <= self.slices:
            raise ValueError(
                f"min_slices must be between 1 and slices ({self.slices}), got {self.min_slices}"
            )
        for name in ("max_retries_preemption", "max_retries_failure"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        for name in ("scale_up_interval_s", "drain_timeout_s", "acquire_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")

    def slice_counts(self) -> int | list[int]:
        if self.min_slices is None or self.min_slices >= self.slices:
            return self.slices
        return list(range(self.min_slices, self.slices + 1))

    def device_counts(self) -> dict[int, int]:
        """The devices of the job on each number of slices it may run on: a fake CPU host has
        ``devices_per_host`` devices, an accelerator host its chips.

        >>> SliceLaunch("cpu-2", slices=3, min_slices=2, devices_per_host=4).device_counts()
        {2: 16, 3: 24}
        """
        from meltemi.raytpu import slice_type

        kind = slice_type(self.slice_type)
        per_host = self.devices_per_host if kind.name.startswith("cpu-") else kind.chips_per_host
        counts = self.slice_counts()
        return {n: n * kind.hosts * per_host for n in ([counts] if isinstance(counts, int) else counts)}


def check_before_launch(config: RunConfig, run_dir: str, launch: SliceLaunch) -> None:
    """What every host would check first, checked here before a cluster starts: the mesh, the batch and
    the model's axes on the job's devices, for every number of slices it may run on, and the trackers
    against the run directory. A ``TrainerError`` naming the field and the launch.

    >>> from meltemi.trainer.config import RunConfig
    >>> config = RunConfig.model_validate({"trainer": {"global_batch_size": 4}})
    >>> check_before_launch(config, "runs/x", SliceLaunch("cpu-1", slices=2))
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.MeshError: --launch ray on 2 slices of cpu-1 (8 devices): trainer.global_batch_size
    4 does not split over the 8 data-parallel devices (trainer.mesh.replica x trainer.mesh.data)
    """
    from meltemi.datastore.storage import Location
    from meltemi.trainer.errors import MeshError
    from meltemi.trainer.run.trackers import check_trackers
    from meltemi.trainer.step.mesh import check_device_count

    check_trackers(config.trainer.trackers, Location.parse(run_dir))
    for slices, devices in launch.device_counts().items():
        try:
            check_device_count(config, devices)
        except MeshError as e:
            where = f"{slices} slice{'s' if slices > 1 else ''} of {launch.slice_type} ({devices} devices)"
            raise MeshError(f"--launch ray on {where}: {e}") from None


def train_on_this_host(config: RunConfig, run_dir: str, devices_per_host: int, fake_cpu: bool) -> HostResult:
    """The workload of every host: fake CPU devices where there is no accelerator, join the job, train."""
    if fake_cpu:
        from meltemi.trainer.step.fake_devices import with_fake_devices

        os.environ["XLA_FLAGS"] = with_fake_devices(devices_per_host)
        os.environ["JAX_PLATFORMS"] = "cpu"
    from meltemi.trainer.step.distributed import initialize_from_environment

    initialize_from_environment()
    import jax

    from meltemi.trainer.trainer import Trainer

    summary = Trainer(config, run_dir).run()
    return HostResult(jax.process_index(), jax.process_count(), summary)


def train_on_slices(
    config: RunConfig,
    run_dir: str | Path,
    launch: SliceLaunch,
    event_log: str | Callable[[str], None] | None = None,
) -> list[HostResult]:
    """Run the training on slices through raytpu (connected to Ray already); each host's ``HostResult``.
    raytpu's events go to ``event_log``: a JSON Lines file, local or in a bucket (``events_file``), or a
    callable given each line (``run_events``)."""
    from meltemi.datastore.storage import local_path_of
    from meltemi.raytpu import RetryPolicy, SliceJobError, run_on_slices, slice_type

    kind = slice_type(launch.slice_type)
    fake_cpu = kind.name.startswith("cpu-")

    def workload() -> HostResult:
        return train_on_this_host(config, where, launch.devices_per_host, fake_cpu)

    local = local_path_of(run_dir)
    where = str(run_dir) if local is None else str(local.resolve())  # a URL stays one
    if isinstance(event_log, (str, os.PathLike)):
        event_log = events_file(event_log)

    try:
        return run_on_slices(
            workload,
            slice_type=kind,
            num_slices=launch.slice_counts(),
            retry=RetryPolicy(
                max_retries_preemption=launch.max_retries_preemption,
                max_retries_failure=launch.max_retries_failure,
                backoff_s=1.0,
            ),
            scale_up_interval_s=launch.scale_up_interval_s,
            drain_timeout_s=launch.drain_timeout_s,
            acquire_timeout_s=launch.acquire_timeout_s,
            event_log=event_log,
            job_name=f"pretrain-{str(run_dir).rstrip('/').rpartition('/')[2]}",
        )
    except SliceJobError as gave_up:
        if gave_up.workload_error is not None:
            raise gave_up.workload_error from gave_up
        raise


def slice_launch(flags: LaunchFlags) -> SliceLaunch:
    """The ``SliceLaunch`` the command's launcher flags ask for (defaults for those not given); a bad flag is
    a one-line ``TrainerError`` before any work is done.

    >>> slice_launch(LaunchFlags("ray", slices=2)).slices
    2
    >>> slice_launch(LaunchFlags("ray", scale_up_every=0))
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.TrainerError: --launch ray: scale_up_interval_s must be positive, got 0
    """
    from meltemi.raytpu import slice_type
    from meltemi.trainer.errors import TrainerError

    if flags.launcher != "ray":
        raise TrainerError(f"--launch {flags.launcher}: the only launcher is ray")
    given = {
        "slice_type": flags.slice_type,
        "slices": flags.slices,
        "min_slices": flags.min_slices,
        "devices_per_host": flags.devices_per_host,
        "acquire_timeout_s": flags.acquire_timeout,
        "scale_up_interval_s": flags.scale_up_every,
        "max_retries_failure": flags.max_failures,
    }
    try:
        launch = SliceLaunch(
            **{"slice_type": "cpu-1", "slices": 1} | {k: v for k, v in given.items() if v is not None}
        )
        slice_type(launch.slice_type)
    except ValueError as e:
        raise TrainerError(f"--launch ray: {e}") from None
    return launch


def run_events(run_dir: str) -> Callable[[str], None]:
    """Where a launch's events go: ``events.jsonl`` in the run directory, through the storage seam, so a
    run in a bucket keeps them with its checkpoints (a relaunch continues the log).

    >>> write = run_events("memory://doc/launched-run")
    >>> write('{"event": "finished"}')
    >>> from meltemi.datastore.storage import Directory
    >>> Directory("memory://doc/launched-run").read_text("events.jsonl")
    '{"event": "finished"}\\n'
    """
    from meltemi.datastore.storage import Location

    return events_file(str(Location.parse(run_dir) / RunDirectory.EVENTS))


def events_file(location: str | os.PathLike) -> Callable[[str], None]:
    """Each line given appended to the JSON Lines file ``location``, local or in a bucket, through the
    storage seam; each is written at once (a job has a handful of events).

    >>> write = events_file("memory://doc/logs/events.jsonl")
    >>> write('{"event": "retry"}')
    >>> from meltemi.datastore.storage import Directory
    >>> Directory("memory://doc/logs").read_text("events.jsonl")
    '{"event": "retry"}\\n'
    """
    from meltemi.datastore.storage import Appender, parent_and_key

    log = Appender(*parent_and_key(location))

    def write(line: str) -> None:
        log.append(line)
        log.flush()

    return write


def check_address(address: str) -> None:
    """Ask ``--address`` once whether anything listens there (Ray itself would retry a silent address for
    minutes); a ``TrainerError`` naming it when nothing does."""
    import socket

    from meltemi.trainer.errors import TrainerError

    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
    except (OSError, ValueError) as e:
        raise TrainerError(f"--address {address}: no Ray cluster answers there ({e})") from None


def build_run_stores(config: RunConfig, address: str | None) -> None:
    """Build the stores of the run's sources that name their raw inputs (``build_from``) and are missing, on
    the Ray cluster at ``address`` (None: in this machine's processes), before the training starts; each
    build's line on stderr. A source whose store could not be built is a ``DataError`` naming it (the other
    sources' stores are kept).

    >>> build_run_stores(RunConfig(), None)  # no source names its inputs: nothing to build
    """
    import sys

    from meltemi.trainer.data.store_builds import BuildOutcome, build_missing_stores, failed_builds

    def show(outcome: BuildOutcome) -> None:
        if not outcome.skipped:
            print(outcome.line, file=sys.stderr)

    failed = failed_builds(build_missing_stores(config, cluster=address, done=show))
    if failed is not None:
        raise failed


def launch_on_ray(
    config: RunConfig, run_dir: str, launch: SliceLaunch, address: str | None
) -> tuple[int, RunSummary]:
    """Train on slices: a local cluster of fake CPU slices, or the Ray cluster at ``address``; the number of
    processes and the run's summary (the first process's). A silent address is a one-line
    ``TrainerError``, and a config the run's checkpoint or the job's devices refuse a ``ConfigError``, all
    before any cluster starts or any file is written. The stores the run's sources build from raw inputs
    (``build_from``) that are missing are built before the training starts (``build_run_stores``): on the
    cluster at ``address``, else here. raytpu's event log goes to ``events.jsonl`` in the run directory,
    local or in a bucket (``run_events``)."""
    import contextlib

    from meltemi.raytpu import LocalSliceCluster, RaytpuError
    from meltemi.trainer.checkpoint.resume import continued_config
    from meltemi.trainer.errors import TrainerError

    config = continued_config(config, run_dir)  # a refused config: one line, no cluster, no file written
    check_before_launch(config, run_dir, launch)
    events = run_events(run_dir)
    if address is not None:
        import ray

        check_address(address)
        try:
            ray.init(address=address, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise TrainerError(f"--address {address}: no Ray cluster answers there ({e})") from None
        build_run_stores(config, address)
        cluster = contextlib.nullcontext()
    else:
        build_run_stores(config, None)  # here, before the local cluster of fake slices starts
        cluster = LocalSliceCluster([(launch.slice_type, launch.slices)])
    with cluster:
        try:
            results = train_on_slices(config, run_dir, launch, event_log=events)
        except RaytpuError as e:
            raise TrainerError(" ".join(str(e).split())) from None
    first = min(results, key=lambda result: result.process_index)
    return first.process_count, first.summary
