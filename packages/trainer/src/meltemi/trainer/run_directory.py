"""A run directory as one object: where it is (a local path or a bucket URL, parsed once), what it holds
and under which names (its layout, the one place those names are written), and whether it can be used
(probed once per process: a command and the trainer it starts share one probe).

    <run>/config.yaml           the run's config, as resolved         CONFIG
          tokenizer.json        the run's copy of its tokenizer       TOKENIZER
          metrics.jsonl         one JSON record per log or eval       METRICS
          batches.jsonl         each step's batch hash                BATCHES
          loss.png              the loss curve                        LOSS_PLOT
          norms.png             parameter, gradient, update norms     NORMS_PLOT
          events.jsonl          a slice job's events (--launch ray)   EVENTS
          checkpoints/step-N/   the checkpoints                       CHECKPOINTS
          profile/              a profiler trace (trainer.profiler)   PROFILE
          hf/step-N/            Hugging Face exports (export_every)   HF_EXPORTS
          .lock                 held by the run training in it        LOCK

The compilation cache is not in it: it is the host's (``step.compile_cache``), mirrored in the run's bucket
(``step.cache_mirror``).

>>> import tempfile
>>> run = RunDirectory.of(tempfile.mkdtemp() + "/run")
>>> run.check(); run.where(RunDirectory.METRICS).endswith("/run/metrics.jsonl")
True
>>> RunDirectory.of("s3://my-bucket/runs/8b").checkpoints.where()
's3://my-bucket/runs/8b/checkpoints'
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import socket
import time
from typing import ClassVar

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Directory, Location, check_readable, check_writable
from meltemi.trainer.errors import TrainerError


@dataclasses.dataclass(frozen=True)
class RunDirectory:
    """A run's directory (``location``) and its layout."""

    location: Location

    CONFIG: ClassVar[str] = "config.yaml"
    TOKENIZER: ClassVar[str] = "tokenizer.json"
    METRICS: ClassVar[str] = "metrics.jsonl"
    BATCHES: ClassVar[str] = "batches.jsonl"
    LOSS_PLOT: ClassVar[str] = "loss.png"
    NORMS_PLOT: ClassVar[str] = "norms.png"
    EVENTS: ClassVar[str] = "events.jsonl"
    CHECKPOINTS: ClassVar[str] = "checkpoints"
    PROFILE: ClassVar[str] = "profile"
    HF_EXPORTS: ClassVar[str] = "hf"
    LOCK: ClassVar[str] = ".lock"

    @staticmethod
    def of(where: str | os.PathLike | Location | RunDirectory) -> RunDirectory:
        """``where`` parsed (a ``RunDirectory`` as it is)."""
        return where if isinstance(where, RunDirectory) else RunDirectory(Location.parse(where))

    @property
    def is_local(self) -> bool:
        return self.location.is_local

    @property
    def files(self) -> Directory:
        """Its small objects (config, metrics, plot, events), read and written through the storage seam."""
        return Directory(self.location)

    @property
    def checkpoints(self) -> Directory:
        return Directory(self.location / self.CHECKPOINTS)

    @property
    def profile(self) -> Location:
        return self.location / self.PROFILE

    def hf_export(self, step: int) -> Location:
        """Where the Hugging Face export of the weights of ``step`` goes (``trainer.export_every``)."""
        return self.location / self.HF_EXPORTS / f"step-{step}"

    def where(self, name: str) -> str:
        """The path or URL of ``name`` in it, as a user would type it."""
        return self.files.where(name)

    def check(self) -> None:
        """Fail at once, in one line, where the directory cannot be used, once per process: a bucket is
        probed with a write (a missing bucket, refused keys, no endpoint: a ``StorageError``); a local
        directory, made only once the run is accepted, is listed (a file in its way: a ``TrainerError``). A
        bucket that passed is not probed again in this process."""
        if self.is_local:  # cheap, and what lies there may change: listed every time
            try:
                check_readable(self.location)
            except StorageError as e:
                raise TrainerError(f"run directory {self.location}: cannot write there ({e})") from None
        else:
            check_writable(self.location, once=True)

    def hold(self) -> RunLock | None:
        """Take a local run directory for this process's run (made if need be), until ``RunLock.release``
        or the process ends, even killed: a second run training in it at once would interleave its records
        and checkpoints with the first's, so it is a ``TrainerError`` naming the holder (its process, host
        and start) and changing nothing. A bucket has no locks: None."""
        if not self.is_local:
            return None
        path = self.location.local_path
        path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 512, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(descriptor)
            raise TrainerError(
                f"run directory {self.location}: another run is training in it ({holder}); wait for it to "
                "end, stop it (Ctrl-C saves a checkpoint), or train in another directory (--run-dir DIR)"
            ) from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"process {os.getpid()} on {socket.gethostname()}, since {started}".encode(), 0)
        return RunLock(descriptor)

    def __str__(self) -> str:
        return str(self.location)


@dataclasses.dataclass
class RunLock:
    """A run directory held by this process (``RunDirectory.hold``)."""

    descriptor: int | None

    def release(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)  # the lock goes with it
            self.descriptor = None
