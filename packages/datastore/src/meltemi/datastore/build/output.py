"""A build's output location: who may write it, and what is already there (a store, a half-built one).

The output is a `Directory` of the storage seam: a local directory, or a prefix in a bucket. A build
first probes it (`check_writable`: a missing bucket or refused credentials fail in one line before any
tokenizing), then checks what it holds against the new build's plan: start fresh, resume, or stop
because the inputs changed.
"""

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from meltemi.datastore.build.lease import LEASE_KEY
from meltemi.datastore.build.records import EARLIER_INVALID_UTF8, Plan, count_phrase
from meltemi.datastore.build.request import BuildRequest
from meltemi.datastore.errors import DatastoreError, Remedy, SourceChangedError, Way
from meltemi.datastore.layout import BUILD_DIR, CHAT_ARRAYS, GROUP, MANIFEST, READABLE_FORMATS, STOPPED
from meltemi.datastore.storage import Directory, check_writable, local_path_of

PLAN = "plan.json"
PLAN_KEY = f"{BUILD_DIR}/{PLAN}"
ELSEWHERE = "; build it in another directory"  # when the user cannot rebuild a store


@contextlib.contextmanager
def only_build(out: Directory, *, wait: bool, say: Callable[[str], None]) -> Iterator[None]:
    """Probe the output, and on a local disk hold an exclusive lock on it, so two builds never write one
    store: while another build holds it, wait for that one to end (saying so once through ``say``), as
    pip's and cargo's caches do, or with ``wait=False`` stop with an error. The lock is the kernel's, so a
    build that dies (even killed) lets it go. An object store has no locks: two builds of one bucket store
    at once are not detected (both write the same bytes, since a build is deterministic, but one may delete
    the other's parts). A local directory the build made and leaves empty (it failed before keeping
    anything) is removed, with the parents it made."""
    local = out.location.local_path
    made = None if local is None else _first_missing(Path(local).absolute())
    check_writable(out.location)
    if local is None:
        yield
        return
    descriptor = os.open(local, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            running = f"another build of {str(out.location)!r} is running"
            if not wait:
                raise DatastoreError(f"{running}; wait for it to finish (or stop it) and run again") from None
            say(f"{running}: waiting for it to finish, then using what it built (Ctrl-C stops waiting)")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
        if made is not None:
            _remove_empty(Path(local).absolute(), up_to=made)


def _first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist (None when ``path`` exists)."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def _remove_empty(path: Path, *, up_to: Path) -> None:
    """Remove ``path``, then each parent up to ``up_to``, while each is an empty directory."""
    for candidate in (path, *path.parents):
        try:
            candidate.rmdir()  # only ever an empty directory
        except OSError:
            return
        if candidate == up_to:
            return


def refuse_foreign(out: Directory) -> None:
    """Stop, writing nothing, when `out` holds objects and none of them a store's or a build's."""
    if out.exists(MANIFEST):
        return
    keys = out.list()
    if keys and not any(key.startswith(f"{BUILD_DIR}/") for key in keys):
        raise DatastoreError(
            f"output {str(out.location)!r} is a non-empty directory that is not a token store"
        )


def prepare_directory(out: Directory, plan: Plan, request: BuildRequest) -> None:
    """Check `out` against `plan`: start fresh, resume, or stop because the inputs changed."""
    shown = str(out.location)
    previous = out.read_json(MANIFEST)
    built = previous is not None
    if not built:
        previous = out.read_json(PLAN_KEY)
        if previous is None:
            refuse_foreign(out)
    if previous is not None:
        rebuild = Way({"overwrite": True}, " to rebuild it")
        planned = plan.to_json()
        difference = _difference(previous, planned)
        fixed = not built and difference is not None and _only_contents_changed(previous, planned)
        unstarted = not built and not out.list(f"{BUILD_DIR}/parts/")  # other options for the same inputs
        fixed = fixed or unstarted and _same_files(previous, planned)  # where it had done nothing: no loss
        if difference and not request.overwrite and not fixed:  # a stopped build's fixed file: start over
            remedy = Remedy("; pass {}", (rebuild,), otherwise=ELSEWHERE)
            raise SourceChangedError(
                f"{shown!r} was built from different inputs: {difference}", remedies=(remedy,)
            )
        handled = _invalid_utf8_handled(previous, request) if built and not difference else None
        if handled and not request.overwrite:
            as_built = {"invalid_utf8": previous.get("invalid_utf8", EARLIER_INVALID_UTF8)}
            remedy = Remedy("; pass {}", (Way(as_built, " to use it as it is"), rebuild), otherwise=ELSEWHERE)
            raise SourceChangedError(f"{shown!r} holds {handled}", remedies=(remedy,))
        difference = difference or handled
        if not difference:
            if built:
                out.delete_prefix(f"{BUILD_DIR}/")
            else:
                out.delete(f"{BUILD_DIR}/{STOPPED}")
                out.write_json(PLAN_KEY, planned)  # the same plan, with the stamps its inputs have now
            return
    for name in (MANIFEST, GROUP):  # the manifest first: the store is no longer complete
        out.delete(name)
    for name in CHAT_ARRAYS:
        out.delete_prefix(f"{name}/")
    _clear_build_state(out)
    out.write_json(PLAN_KEY, plan.to_json())


def _clear_build_state(out: Directory) -> None:
    """Delete what an earlier build kept under `.build/`, all but the lease: this build took it already, and
    renews it by its generation (deleted, it would be lost, and the finished build refused)."""
    names = {key[len(BUILD_DIR) + 1 :].partition("/")[:2] for key in out.list(f"{BUILD_DIR}/")}
    for name, slash in sorted(names):
        if slash:
            out.delete_prefix(f"{BUILD_DIR}/{name}/")
        elif f"{BUILD_DIR}/{name}" != LEASE_KEY:
            out.delete(f"{BUILD_DIR}/{name}")


def _same_files(previous: dict, plan: dict) -> bool:
    """Whether both sides read the same files in the same order (their contents may differ)."""
    old, new = _files(previous, plan)
    return old == new


def _files(previous: dict, plan: dict) -> tuple[list[str], list[str]]:
    """The files each side's sources name, in order: the paths as recorded when both sides spell them
    alike (no lookup), else each local path with its links resolved (`_same_file`)."""
    old, new = ([s["url"] for s in record["sources"]] for record in (previous, plan))
    if old == new:
        return old, new
    return [_same_file(url) for url in old], [_same_file(url) for url in new]


def _only_contents_changed(previous: dict, plan: dict) -> bool:
    """Whether `plan` reads the same files in the same order, with the same tokenizer and options, as the
    half-built store's plan `previous`, only some of them changed (a bad line fixed where the build stopped:
    its parts cannot be kept, since units follow the files' sizes, but no other corpus is lost)."""
    keys = ("format_version", "tokenizer", "options")
    return _same_files(previous, plan) and all(previous.get(key) == plan[key] for key in keys)


def _same_file(url: str) -> str:
    """A source's identity: a local path with its links resolved (a file named through a link is the file
    it names, so a store built from it is found again), any other URL as it is."""
    local = local_path_of(url)
    return url if local is None else local.resolve().as_posix()


def _invalid_utf8_handled(manifest: dict, request: BuildRequest) -> str | None:
    """What a finished store did with documents that are not UTF-8, when it is not what `request` asks."""
    count = manifest["counts"].get("invalid_utf8_documents", 0)
    policy = manifest.get("invalid_utf8", EARLIER_INVALID_UTF8)
    if not count or policy == request.invalid_utf8:
        return None
    return (
        f"{count_phrase('invalid_utf8_documents', count, policy)}, and this build's policy for invalid "
        f"UTF-8 is {request.invalid_utf8!r}"
    )


def _difference(previous: dict, plan: dict) -> str | None:
    """The first way `plan` (as JSON) differs from what a store or half-built store was made from, in words.

    Both sides are read as JSON, since `previous` may be a manifest or a plan written by another version.
    """
    if previous.get("format_version") not in READABLE_FORMATS:  # an older readable one: the same bytes
        return f"format version {previous.get('format_version')} != {plan['format_version']}"
    old_files, new_files = _files(previous, plan)
    old = dict(zip(old_files, previous["sources"], strict=True))
    new = dict(zip(new_files, plan["sources"], strict=True))
    for file in sorted(old.keys() | new.keys()):
        if file not in new:
            return f"source {old[file]['url']} is no longer among the inputs"
        if file not in old:
            return f"source {new[file]['url']} is new"
        before, now = ({k: s[file][k] for k in ("size", "sha256")} for s in (old, new))
        if before != now:
            sizes = f"size {before['size']} -> {now['size']}"
            return f"source {new[file]['url']} changed ({sizes}, content hash differs)"
    if list(old) != list(new):
        return "the same sources, named by other paths that put them in another order"
    if previous["tokenizer"] != plan["tokenizer"]:
        if previous["tokenizer"]["sha256"] == plan["tokenizer"]["sha256"]:  # the same file, read otherwise
            return f"tokenizer {plan['tokenizer']['name']}: " + "; ".join(
                _changes(previous["tokenizer"], plan["tokenizer"], "")
            )
        return (
            f"tokenizer {previous['tokenizer']['name']} ({previous['tokenizer']['sha256'][:12]}) "
            f"!= {plan['tokenizer']['name']} ({plan['tokenizer']['sha256'][:12]})"
        )
    if previous["options"] != plan["options"]:
        return _options_difference(previous["options"], plan["options"])
    return None


def _options_difference(previous: dict, plan: dict) -> str:
    """The options that differ, by dotted name, each with its value then and now.

    >>> then, now = {"eos": True, "chat": {"loss_on": "all", "x": 1}}, {"eos": False, "chat": {"x": 2}}
    >>> _options_difference(then, now)
    "options chat.loss_on: 'all' then, None now; chat.x: 1 then, 2 now; eos: True then, False now"
    """
    changes = _changes(previous, plan, "")
    return ("options " if len(changes) > 1 else "option ") + "; ".join(changes)


def _changes(previous: dict, plan: dict, prefix: str) -> list[str]:
    changes = []
    for key in sorted(previous.keys() | plan.keys()):
        before, now = previous.get(key), plan.get(key)
        if isinstance(before, dict) and isinstance(now, dict):
            changes += _changes(before, now, f"{prefix}{key}.")
        elif before != now:
            changes.append(f"{prefix}{key}: {before!r} then, {now!r} now")
    return changes
