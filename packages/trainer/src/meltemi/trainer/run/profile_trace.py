"""The profiler's trace (``trainer.profiler``) in the run directory, local or in a bucket.

JAX's profiler writes through file systems of its own, which reach no ``s3://`` or ``memory://`` location
(a run in such a bucket failed when its traced steps ended: "File system scheme 's3' not implemented"). So
the trace is written to a local directory, the run's own ``profile/`` when the run is local, and for a run
in a bucket it is then copied into ``<run dir>/profile`` through the storage seam, file by file under the
same names (TensorBoard's profile plugin reads that layout), and the local copy deleted. A failed copy
leaves the local copy where it is.

>>> from meltemi.datastore.storage import Directory, Location
>>> trace = ProfileTrace(Location.parse("memory://doc/traced-run/profile"))
>>> trace.start(); _ = jax.numpy.ones(3).block_until_ready(); trace.stop()
>>> any(key.endswith(".xplane.pb") for key in Directory("memory://doc/traced-run/profile").list())
True
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import jax

from meltemi.datastore.storage import Directory, Location


class ProfileTrace:
    """A trace of the steps between ``start`` and ``stop``, kept in ``destination`` (a run's ``profile``)."""

    def __init__(self, destination: Location):
        self.destination = destination
        self.local: Path | None = None

    def start(self) -> None:
        """Start tracing into a local directory: the destination itself when it is local."""
        local = self.destination.local_path
        self.local = local if local is not None else Path(tempfile.mkdtemp(prefix="meltemi-profile-"))
        jax.profiler.start_trace(str(self.local))

    def stop(self) -> None:
        """Stop tracing (JAX's error when none was started) and, for a destination in a bucket, copy the
        trace there."""
        jax.profiler.stop_trace()
        if self.destination.is_local or self.local is None:
            return
        directory = Directory(self.destination)
        for path in sorted(path for path in self.local.rglob("*") if path.is_file()):
            directory.write_bytes(path.relative_to(self.local).as_posix(), path.read_bytes())
        shutil.rmtree(self.local)
