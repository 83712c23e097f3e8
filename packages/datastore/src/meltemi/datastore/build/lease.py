"""Who is building a store: a lease object in its output location, held by one build at a time.

A build takes `.build/lease.json` with a conditional write (it is written only if it is still what the build
read: absent, or a holder that stopped renewing it), renews it every `RENEW_SECONDS` from a thread, and
deletes it when it ends. Another build of the same store, from any host, finds it and is refused, naming the
holder (host, process, start) and when the lease runs out if that holder is gone. A holder that was killed
stops renewing: its lease runs out after `TTL_SECONDS`, or at once for a build on the same host whose
process no longer exists. A bucket has no locks; the lease is the same objects on every backend.

>>> from meltemi.datastore.storage import Directory
>>> out = Directory("memory://doc/lease-store")
>>> with Lease(out) as lease:
...     lease.holder.host == socket.gethostname()
True
>>> out.exists(LEASE_KEY)
False
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from meltemi.datastore.errors import BuildInProgressError
from meltemi.datastore.layout import BUILD_DIR
from meltemi.datastore.storage import Directory

LEASE_KEY = f"{BUILD_DIR}/lease.json"
TTL_SECONDS = 90.0
RENEW_SECONDS = 15.0


@dataclass(frozen=True)
class Holder:
    """The build holding a lease: where it runs, since when, and when it last said it was alive."""

    host: str
    pid: int
    started: str  # ISO 8601, UTC
    renewed: float  # seconds since the epoch
    token: str  # this build's own, so that it knows its lease from another's

    def describe(self) -> str:
        return f"host {self.host}, process {self.pid}, started {self.started}"

    def alive(self, now: float) -> bool:
        """Whether the holder may still be building: it renewed within the TTL, and on this host its
        process still exists."""
        if now - self.renewed > TTL_SECONDS:
            return False
        if self.host == socket.gethostname():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:  # another user's process: it exists
                return True
        return True


class Lease:
    """The lease on the store at `out`, taken on entry (or a `BuildInProgressError` naming its holder),
    renewed while held, and given back on exit."""

    def __init__(
        self,
        out: Directory,
        ttl: float = TTL_SECONDS,
        renew: float = RENEW_SECONDS,
        before: Callable[[Directory], None] | None = None,
    ):
        self.out, self.ttl, self.renew, self.before = out, ttl, renew, before
        started = datetime.now(UTC).isoformat(timespec="seconds")
        self.holder = Holder(socket.gethostname(), os.getpid(), started, time.time(), uuid.uuid4().hex)
        self.lost: str | None = None  # why the lease was lost while held (another build took it)
        self._generation: bytes | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        if self.before is not None:  # a check that must pass before anything is written (`before(out)`)
            self.before(self.out)
        kvstore = self.out.kvstore
        found = kvstore.read(LEASE_KEY).result()
        if found.state == "value":
            other = _holder(bytes(found.value))
            if other is not None and other.token != self.holder.token and other.alive(time.time()):
                left = max(0.0, self.ttl - (time.time() - other.renewed))
                raise BuildInProgressError(
                    f"another build of {str(self.out.location)!r} is running ({other.describe()}; it last "
                    f"renewed its lease {time.time() - other.renewed:.0f}s ago); wait for it to finish, or "
                    f"if it was stopped, run again in {left:.0f}s when its lease runs out"
                )
        if not self._write(found.stamp.generation):
            raise BuildInProgressError(
                f"another build of {str(self.out.location)!r} took its lease at the same moment; run again "
                "to see which build holds it"
            )
        self._thread = threading.Thread(target=self._keep, name="store-lease", daemon=True)
        self._thread.start()
        return self

    def _write(self, if_equal: bytes) -> bool:
        self.holder = Holder(**(asdict(self.holder) | {"renewed": time.time()}))
        payload = json.dumps(asdict(self.holder), sort_keys=True).encode()
        written = self.out.kvstore.write(LEASE_KEY, payload, if_equal=if_equal).result()
        if not written.generation:  # the condition failed: the object is not what was read
            return False
        self._generation = written.generation
        return True

    def _keep(self) -> None:
        while not self._stop.wait(self.renew):
            try:
                renewed = self._write(self._generation or b"")
            except ValueError:  # TensorStore's failed request, after its retries: tried again next period
                continue
            if not renewed:
                self.lost = "another build replaced this build's lease (it was not renewed in time)"
                return

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is None and self._generation is not None:
            self.out.kvstore.write(LEASE_KEY, None, if_equal=self._generation).result()
        local = self.out.location.local_path
        if local is not None:
            with contextlib.suppress(OSError):  # the build's directory, when the lease was all it held
                (local / BUILD_DIR).rmdir()


def _holder(payload: bytes) -> Holder | None:
    """The holder a lease object names; None for one that cannot be read (taken over)."""
    try:
        return Holder(**json.loads(payload))
    except (ValueError, TypeError):
        return None
