"""The compilation cache kept in a bucket too, so that a host that replaces a preempted one (an empty HOME,
an empty local cache) loads the run's compiled programs instead of compiling them again.

JAX reads and writes its persistent cache on local disk (``compile_cache``); the mirror copies its entries
(``<key>-cache`` files, one compiled program each, named by JAX's hash of the program, the devices and the
flags, made the same on every host: ``compile_cache.portable_keys``) through the storage seam: ``pull``
fetches the bucket's entries the local cache lacks before anything compiles, ``push`` uploads the local
entries the bucket lacks once the programs are compiled (the first process only): those this run used, the
entries whose access time JAX stamped (``<key>-atime``, on every write and load) since the mirror opened, not
every program a shared local cache holds from other runs (up to its 8 GiB). A cache JAX keeps no access
times for (``JAX_COMPILATION_CACHE_MAX_SIZE=-1``) cannot tell: all of its entries are pushed. An entry is
written aside and renamed into the local cache with its access time beside it, as JAX writes its own, so a
process reading the cache meanwhile sees a whole entry or none. Where the mirror is, is a decision with a
reason (``choose_mirror``): ``trainer.compile_cache_mirror`` when it names a URL, off when it is false, else
``meltemi-compile-cache/`` at the root of the run directory's bucket (none for a local run directory).

>>> import tempfile
>>> from meltemi.datastore.storage import Location
>>> choose_mirror(None, Location.parse("s3://my-bucket/runs/8b")).where
's3://my-bucket/meltemi-compile-cache'
>>> choose_mirror(None, Location.parse("runs/tiny")).reason
'the run directory is local'
>>> local = tempfile.mkdtemp()
>>> mirror = CacheMirror(local, Directory("memory://doc/compile-cache"))
>>> _ = open(f"{local}/abc-cache", "wb").write(b"program"); mirror.push(), mirror.pull()
(1, 0)
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.storage import Directory, Location, first_contact, url_scheme
from meltemi.trainer.step.compile_cache import CacheChoice, CacheCounter

ENTRY = "-cache"  # JAX's suffix for a cached program; its "-atime" files are local bookkeeping
ACCESS_TIME = "-atime"
BUCKET_FOLDER = "meltemi-compile-cache"


@dataclasses.dataclass(frozen=True)
class MirrorChoice:
    """Where the compilation cache is mirrored (``where``: a URL, or None: nowhere), and why."""

    where: str | None
    reason: str


def choose_mirror(setting: str | bool | None, run_dir: Location) -> MirrorChoice:
    """The mirror ``trainer.compile_cache_mirror`` (``setting``) asks for with the run in ``run_dir``."""
    if setting is False:
        return MirrorChoice(None, "trainer.compile_cache_mirror: false")
    if isinstance(setting, str):
        return MirrorChoice(setting.rstrip("/"), "trainer.compile_cache_mirror")
    if run_dir.is_local:
        return MirrorChoice(None, "the run directory is local")
    root = Location.parse(f"{run_dir.scheme}://{run_dir.bucket}")
    return MirrorChoice(str(root / BUCKET_FOLDER), "beside the run, in its bucket")


class CacheMirror:
    """The local cache directory ``local`` mirrored in the bucket folder ``remote``; ``fetched`` and
    ``uploaded`` count what this process copied."""

    def __init__(self, local: str | os.PathLike, remote: Directory):
        self.local, self.remote = Path(local), remote
        self.fetched = self.uploaded = 0
        self.opened_ns = time.time_ns()

    def _stamp(self, key: str) -> Path:
        """The local access-time file of the entry ``key`` (JAX's bookkeeping beside it)."""
        return self.local / (key.removesuffix(ENTRY) + ACCESS_TIME)

    def _used(self, key: str) -> bool:
        """Whether this run used a local entry: JAX stamped its access time since the mirror opened (or
        keeps no access times, and it cannot be told)."""
        try:
            return int.from_bytes(self._stamp(key).read_bytes()[:8], "little") >= self.opened_ns
        except FileNotFoundError:
            return True

    def _remote_entries(self) -> set[str]:
        listed = first_contact(self.remote.location, lambda folder: folder.list())  # unreachable: at once
        return {key for key in listed if key.endswith(ENTRY) and "/" not in key}

    def pull(self) -> int:
        """Fetch the entries the local cache lacks; how many."""
        self.local.mkdir(parents=True, exist_ok=True)
        count = 0
        for key in sorted(self._remote_entries()):
            target = self.local / key
            if target.exists():
                continue
            data = self.remote.read_bytes(key)
            if data is None:  # removed since the listing
                continue
            aside = self.local / f".{key}.{os.getpid()}.partial"
            aside.write_bytes(data)
            self._stamp(key).write_bytes(
                time.time_ns().to_bytes(8, "little")
            )  # before the entry: JAX's eviction reads it
            os.replace(aside, target)
            count += 1
        self.fetched += count
        return count

    def push(self) -> int:
        """Upload the local entries this run used that the bucket lacks; how many."""
        if not self.local.is_dir():
            return 0
        there = self._remote_entries()
        count = 0
        for path in sorted(self.local.glob(f"*{ENTRY}")):
            if path.name not in there and self._used(path.name):
                self.remote.write_bytes(path.name, path.read_bytes())
                count += 1
        self.uploaded += count
        return count

    def describe(self) -> str:
        """One phrase for the startup line."""
        return f"mirrored in {self.remote.where()} ({self.fetched} fetched, {self.uploaded} uploaded)"


def is_mirrorable(directory: str | None) -> bool:
    """Whether a local cache directory can be mirrored (JAX's cache is off, or itself in a bucket: not)."""
    return directory is not None and url_scheme(directory) is None


def open_mirror(
    setting: str | bool | None, run_dir: Location, cache_directory: str | None
) -> CacheMirror | None:
    """The mirror of the local cache ``cache_directory`` the setting and the run directory ask for (None:
    no mirror, or no local cache to mirror)."""
    choice = choose_mirror(setting, run_dir)
    if choice.where is None or not is_mirrorable(cache_directory):
        return None
    from meltemi.trainer.step.compile_cache import portable_keys

    portable_keys()
    return CacheMirror(cache_directory, Directory(choice.where))


class RunMirror:
    """A run's mirror as the run uses it: ``pull`` on every process before anything compiles, ``push`` on the
    first once its programs are compiled; a storage failure only costs the mirror, said once with ``note``,
    and the run goes on without it. ``line`` says what the compilation cache did this session.

    >>> RunMirror(None, primary=True).line(CacheChoice(None, "trainer.compile_cache_dir is off"), None)
    'compilation cache off (trainer.compile_cache_dir is off)'
    """

    def __init__(self, mirror: CacheMirror | None, *, primary: bool):
        self.mirror, self.primary = mirror, primary

    def pull(self, note: Callable[[str], None]) -> None:
        """Fetch the bucket's compiled programs the local cache lacks (every process)."""
        self._sync(lambda mirror: mirror.pull(), note)

    def push(self, note: Callable[[str], None]) -> None:
        """Upload the programs this run used that the bucket lacks (the first process)."""
        if self.primary:
            self._sync(lambda mirror: mirror.push(), note)

    def _sync(self, direction: Callable[[CacheMirror], int], note: Callable[[str], None]) -> None:
        if self.mirror is None:
            return
        try:
            direction(self.mirror)
        except DatastoreError as e:
            note(f"compilation cache mirror off: {e}")
            self.mirror = None

    def line(self, choice: CacheChoice, counter: CacheCounter | None) -> str:
        """The compilation cache's choice, the mirror's, and what the session found in them (``counter``)."""
        if not choice.enabled or counter is None:
            return choice.describe()
        mirror = "" if self.mirror is None else f", {self.mirror.describe()}"
        return f"{choice.describe()}{mirror}: {counter.describe()}"
