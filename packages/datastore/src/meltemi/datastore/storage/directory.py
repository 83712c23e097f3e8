"""Small-object I/O at a `Location`, through one TensorStore kvstore whatever the backend.

A `Directory` reads and writes whole objects (manifests, configs, plans, parts of a build), lists and
deletes by prefix, and gives the specs of arrays stored under it. The local disk is TensorStore's `file`
driver like any other backend: a write goes to a file aside, is flushed to disk, renamed into place and
the directory flushed, so readers see all of an object or none of it; on GCS and S3 a single-object PUT
is atomic. That is the commit primitive: write the data, then one small marker object last.

Every TensorStore error becomes one line naming the URL and the mistake (see `failures.py`). Before doing
any work, `check_writable` and `check_readable` probe a location with a short retry budget, so a missing
bucket, refused credentials or an unreachable endpoint are reported at once, not after an hour of work;
the log lines TensorStore's clients print during a probe are held back (`native_log.py`), the probe's own
error saying what went wrong.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import tensorstore as ts

from meltemi.datastore.errors import (
    AccessDeniedError,
    NoSuchBucketError,
    NotAFileError,
    OutOfRangeError,
    StorageError,
    UnreachableError,
)
from meltemi.datastore.storage.failures import storage_error
from meltemi.datastore.storage.location import DEFAULT_RETRIES, PROBE_RETRIES, Location, Retries
from meltemi.datastore.storage.native_log import native_log_held

_CONTEXT: ts.Context | None = None
PROBE_PREFIX = ".meltemi-probe-"


def storage_context() -> ts.Context:
    """The TensorStore context every location of this process opens with: it shares connections and
    concurrency limits, and makes `memory://` locations one store per process, as a disk is."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = ts.Context()
    return _CONTEXT


def _empty_abandoned_lock_file(path: Path) -> None:
    """Empty `<path>.__lock` when a killed process left it behind.

    TensorStore's `file` driver writes an object into `<path>.__lock` under a POSIX lock and renames it into
    place, without truncating it first; so the file a process killed mid-write leaves there makes the next,
    shorter object end with the tail of the killed one (a rewound `metrics.jsonl` got its dropped rows
    back). A lock no other process holds is abandoned: empty it. Writes of one key are not concurrent
    within a process here (closing this descriptor would release such a writer's POSIX lock).
    """
    try:
        fd = os.open(f"{path}.__lock", os.O_RDWR)
    except OSError:  # none there (the usual case), or not ours to touch: TensorStore reports that
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
    except OSError:  # another process is writing the object now: its write truncates nothing either way
        pass
    finally:
        os.close(fd)  # releases the lock


class Directory:
    """The objects under a location, by key (a `/`-separated path relative to it).

    >>> d = Directory("memory://doc/run")
    >>> d.write_text("config.yaml", "seed: 1\\n")
    >>> d.write_json("step-2/manifest.json", {"step": 2})
    >>> d.read_text("config.yaml"), d.read_json("step-2/manifest.json"), d.read_bytes("absent")
    ('seed: 1\\n', {'step': 2}, None)
    >>> d.list(), d.list("step-2/"), d.exists("config.yaml")
    (['config.yaml', 'step-2/manifest.json'], ['step-2/manifest.json'], True)
    >>> d.delete_prefix("step-2/"); d.list()
    ['config.yaml']
    """

    def __init__(self, location: str | os.PathLike | Location, retries: Retries = DEFAULT_RETRIES):
        self.location = Location.parse(location)
        self.retries = retries
        self._kvstore: ts.KvStore | None = None

    def __repr__(self) -> str:
        return f"Directory({str(self.location)!r})"

    def __truediv__(self, key: str) -> Directory:
        return Directory(self.location / key, self.retries)

    def where(self, key: str = "") -> str:
        """The object's path or URL, as the user spelled the location, for messages."""
        return str(self.location / key)

    @property
    def kvstore(self) -> ts.KvStore:
        """The TensorStore kvstore of this location (opened on first use)."""
        if self._kvstore is None:
            spec = self.location.kvstore_spec(self.retries)
            try:
                self._kvstore = ts.KvStore.open(spec, context=storage_context()).result()
            except ValueError as e:
                raise storage_error(self.where(), "opening", e) from None
        return self._kvstore

    def array_spec(self, name: str) -> dict[str, Any]:
        """The TensorStore spec of the Zarr v3 array `name` under this location (open it with
        `storage_context()`)."""
        return {"driver": "zarr3", "kvstore": (self.location / name).kvstore_spec(self.retries)}

    def read_bytes(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is no such object."""
        try:
            result = self.kvstore.read(key).result()
        except ValueError as e:
            raise storage_error(self.where(key), "reading", e) from None
        return None if result.state == "missing" else bytes(result.value)

    def read_range(self, key: str, start: int, stop: int | None = None) -> bytes | None:
        """Bytes `[start, stop)` of the object, `0 <= start`, in one ranged request; None when there is no
        such object.

        With `stop` None, the bytes from `start` to the end (none when it starts past the end); with a
        `stop`, a range the object does not hold is an `OutOfRangeError` (a file cut short).

        >>> d = Directory("memory://doc/ranges")
        >>> d.write_bytes("header", b"0123456789")
        >>> d.read_range("header", 2, 5), d.read_range("header", 8), d.read_range("absent", 0, 4)
        (b'234', b'89', None)
        >>> d.read_range("header", 8, 12)
        Traceback (most recent call last):
        ...
        meltemi.datastore.errors.OutOfRangeError: memory://doc/ranges/header: reading bytes 8..12 failed: ...
        """
        if start < 0:
            raise ValueError(f"read_range: start must be at least 0, got {start}")
        try:
            result = self.kvstore.read(key, byte_range=slice(start, stop)).result()
        except ValueError as e:
            error = storage_error(self.where(key), f"reading bytes {start}..{stop}", e)
            if stop is None and isinstance(error, OutOfRangeError):
                return b""
            raise error from None
        return None if result.state == "missing" else bytes(result.value)

    def read_text(self, key: str) -> str | None:
        data = self.read_bytes(key)
        return None if data is None else data.decode("utf-8")

    def read_json(self, key: str) -> Any:
        """The object parsed as JSON, or None when there is no such object."""
        data = self.read_bytes(key)
        return None if data is None else json.loads(data)

    def write_bytes(self, key: str, data: bytes | bytearray) -> None:
        """Replace the object with `data`, atomically: a reader sees the old object or all of the new one.

        A `bytearray` is taken as it is (filled in place, it need not become `bytes` first); TensorStore
        copies the object as it takes it, briefly holding twice its size more."""
        local = self.location.local_path
        if local is not None:
            _empty_abandoned_lock_file(local / key)
        try:
            self.kvstore.write(key, data).result()
        except ValueError as e:
            raise storage_error(self.where(key), "writing", e, not_found_is_bucket=True) from None

    def write_text(self, key: str, text: str) -> None:
        self.write_bytes(key, text.encode("utf-8"))

    def write_json(self, key: str, payload: Any) -> None:
        """`payload` as indented JSON with sorted keys (the same bytes for the same payload)."""
        self.write_text(key, json.dumps(payload, indent=1, sort_keys=True) + "\n")

    def exists(self, key: str) -> bool:
        try:
            return self.kvstore.read(key, byte_range=slice(0, 0)).result().state != "missing"
        except ValueError as e:
            raise storage_error(self.where(key), "reading", e) from None

    def list(self, prefix: str = "") -> list[str]:
        """The keys that start with `prefix`, sorted (relative to the location, prefix included)."""
        try:
            keys = self.kvstore.list(_prefix_range(prefix)).result()
        except ValueError as e:
            raise storage_error(self.where(prefix), "listing", e, not_found_is_bucket=True) from None
        # Filtered here too: some servers (the GCS emulator) ignore the range's bounds.
        return sorted(k for k in (key.decode("utf-8") for key in keys) if k.startswith(prefix))

    def delete(self, key: str) -> None:
        """Delete the object (nothing happens when there is none)."""
        try:
            self.kvstore.write(key, None).result()
        except ValueError as e:
            raise storage_error(self.where(key), "deleting", e, not_found_is_bucket=True) from None

    def delete_prefix(self, prefix: str = "") -> None:
        """Delete every object whose key starts with `prefix` (all of them for the empty prefix)."""
        try:
            self.kvstore.delete_range(_prefix_range(prefix)).result()
        except ValueError as e:
            raise storage_error(self.where(prefix), "deleting", e, not_found_is_bucket=True) from None
        local = self.location.local_path
        if local is not None and prefix.endswith("/"):
            _remove_empty_directories(local / prefix)


def _remove_empty_directories(root: Path) -> None:
    """Remove the directories left empty under `root` (and `root`), as an object store has none: TensorStore's
    `file` driver deletes the files of a range but keeps the directories that held them."""
    if not root.is_dir():
        return
    for directory, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):  # not empty: something else lives there
            os.rmdir(directory)


_Result = TypeVar("_Result")


def read_object(location: str | os.PathLike | Location) -> bytes | None:
    """The bytes of the one object `location` names (a local file, or a key in a bucket); None when missing.
    An endpoint that cannot be reached, a missing bucket or refused credentials fail as fast as a probe
    (`first_contact`): this is how a command reads its config, tokenizer or template before any work.

    >>> Directory("memory://doc/objects").write_text("tokenizer.json", "{}")
    >>> read_object("memory://doc/objects/tokenizer.json"), read_object("memory://doc/objects/nothing")
    (b'{}', None)
    """
    parent, key = parent_and_key(location)
    return first_contact(parent.location, lambda directory: directory.read_bytes(key))


def parent_and_key(location: str | os.PathLike | Location) -> tuple[Directory, str]:
    """The directory holding the object `location` names (shown as the user spelled it), and its key there.

    >>> parent_and_key("gs://bucket/run/config.yaml")
    (Directory('gs://bucket/run'), 'config.yaml')
    """
    named = Location.parse(location)
    parent, _, key = named.path.rpartition("/")
    shown = str(named).rstrip("/").rpartition("/")[0]
    return Directory(Location(named.scheme, named.bucket, parent, shown)), key


def file_to_write(location: str | os.PathLike, example: str) -> tuple[Directory, str]:
    """The folder (probed writable, once per process) that holds the file `location` names, and the file's
    key there, for a command that writes one file (results, a conversation), local or in a bucket; a
    `NotAFileError` when `location` names a folder (`evals/`, a bucket, a local directory), suggesting
    `example` in it. Whether a file is there already is the caller's to decide.

    >>> folder, key = file_to_write("memory://doc/evals/results.json", "results.json")
    >>> folder, key
    (Directory('memory://doc/evals'), 'results.json')
    >>> file_to_write("memory://doc/evals/", "results.json")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.NotAFileError: memory://doc/evals/: names a folder; name a file, e.g. memory://...
    """
    target, shown = Location.parse(location), os.fspath(location)
    local = target.local_path
    if shown.endswith("/") or not target.path or (local is not None and local.is_dir()):
        raise NotAFileError(f"{shown}: names a folder; name a file, e.g. {shown.rstrip('/')}/{example}")
    folder, key = parent_and_key(target)
    return Directory(check_writable(folder.location, once=True)), key


def first_contact(location: str | os.PathLike | Location, request: Callable[[Directory], _Result]) -> _Result:
    """`request` made on a `Directory` at `location` with a probe's few retries: a mistake that no retry
    mends (an endpoint that cannot be reached, a missing bucket, refused credentials) is said in about a
    second, as `check_readable` says it, instead of after the default retries' minutes; any other failure
    (a transient one) is made again with the default retries.

    >>> first_contact("memory://doc/first", lambda directory: directory.list())
    []
    """
    try:
        return request(Directory(location, PROBE_RETRIES))
    except (UnreachableError, NoSuchBucketError, AccessDeniedError):
        raise
    except StorageError:
        return request(Directory(location))


def check_writable(location: str | os.PathLike | Location, *, once: bool = False) -> Location:
    """Write and delete a probe object at `location`, failing fast with a `StorageError` that names the
    mistake (unknown scheme, no such bucket, refused credentials, unreachable endpoint, a file in the way).
    Probes a killed process left there are deleted too (deleting another process's probe first only makes
    its own delete find nothing). With `once`, a location that passed is not probed again in this process
    while the environment that picks endpoints and credentials is the same (a command and the library it
    calls share one probe).

    >>> check_writable("memory://probe/run").url
    'memory://probe/run'
    """
    directory = Directory(location, PROBE_RETRIES)
    if once and (directory.where(), _storage_environment()) in _WRITABLE:
        return directory.location
    key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        with native_log_held():  # a client's own log lines: this probe's error says it in one
            directory.kvstore.write(key, b"probe").result()  # not empty: the GCS emulator refuses those
            directory.kvstore.delete_range(_prefix_range(PROBE_PREFIX)).result()  # ours and any left behind
    except ValueError as e:
        raise storage_error(
            directory.where(), "writing a probe object", e, not_found_is_bucket=True
        ) from None
    _WRITABLE.add((directory.where(), _storage_environment()))  # as the probe left it (emulator variables)
    return directory.location


_WRITABLE: set[tuple[str, tuple[tuple[str, str], ...]]] = set()  # locations probed, with their environment
_ENVIRONMENT_PREFIXES = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_", "STORAGE_EMULATOR_HOST", "TENSORSTORE_")


def _storage_environment() -> tuple[tuple[str, str], ...]:
    """The variables that choose a request's endpoint and credentials, as they are now."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENVIRONMENT_PREFIXES)))


def check_readable(location: str | os.PathLike | Location) -> Location:
    """List (at most one key of) `location`, failing fast with a `StorageError` that names the mistake.

    An empty or absent prefix is readable: whether what the caller wants is there is its own question.
    In a GCS bucket one key is read too (none is there: a missing object is no error): TensorStore's GCS
    listing drops an error the server answers with (a refused token lists nothing), its reads do not.

    >>> check_readable("memory://probe/nothing-here").url
    'memory://probe/nothing-here'
    """
    directory = Directory(location, PROBE_RETRIES)
    try:
        with native_log_held():
            directory.kvstore.list(_prefix_range(PROBE_PREFIX)).result()
    except ValueError as e:
        raise storage_error(directory.where(), "listing", e, not_found_is_bucket=True) from None
    if directory.location.scheme == "gs":
        try:
            with native_log_held():
                directory.kvstore.read(f"{PROBE_PREFIX}read").result()
        except ValueError as e:
            raise storage_error(directory.where(), "reading", e) from None
    return directory.location


def _prefix_range(prefix: str) -> ts.KvStore.KeyRange:
    """The keys that start with `prefix`: from it up to (not including) the next string of its length."""
    start = prefix.encode("utf-8")
    stem = start.rstrip(b"\xff")
    if not stem:
        return ts.KvStore.KeyRange(start)
    return ts.KvStore.KeyRange(start, stem[:-1] + bytes([stem[-1] + 1]))
