"""The stores a run builds from raw inputs: each source of ``data.sources`` that names its inputs
(``build_from``) is built at its ``store``, local or in a bucket, where no finished store is there yet.

The sources' builds run side by side, a thread each, shown as one display (``build_progress``); a build's
own units run in parallel inside it, in local processes or as tasks of a Ray cluster (``cluster``:
``auto`` or ``HOST:PORT``). A source whose build
fails is one line naming it and the problem, and the other sources' stores are built and kept.
``apps/build_stores.py`` and ``apps/pretrain.py --launch ray`` (before training) both call
:func:`build_missing_stores`.

>>> from meltemi.trainer.config import RunConfig
>>> sources = {"web": {"store": "memory://doc/web", "build_from": ["raw/web/", "more/*.jsonl"]}}
>>> [build.plan_line() for build in store_builds(RunConfig(data={"sources": sources}))]
['data.sources.web: memory://doc/web is to be built from raw/web/, more/*.jsonl']
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import queue
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from meltemi.datastore import DatastoreError
from meltemi.datastore.layout import MANIFEST
from meltemi.datastore.storage import Location, first_contact
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.build_progress import SideBySideBuilds
from meltemi.trainer.data.build_words import in_command_words
from meltemi.trainer.data.chat import chat_recipe
from meltemi.trainer.data.run_tokenizer import tokenizer_file
from meltemi.trainer.data.sources import MESSAGES_FLAG, SOURCE_FLAGS, format_options, tokenizer_for_stores
from meltemi.trainer.errors import ConfigError, DataError, TrainerError

if TYPE_CHECKING:
    from meltemi.datastore import BuildReport
    from meltemi.datastore.chat.recipe import ChatRecipe

SHOWN_INPUTS = 3  # inputs a line names before "and N more"
BUILD_THEM = (  # how a user builds the stores a run's sources name by their inputs
    "build it from its build_from with uv run apps/build_stores.py and the run's --config and overrides (or "
    "train with --launch ray, which builds it first)"
)


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class StoreBuild:
    """A source (or an eval set: ``section`` ``eval_sets``) whose store is built from raw inputs: its name,
    its inputs and where the store is."""

    source: str
    inputs: tuple[str, ...]
    store: str
    section: str = "sources"

    @property
    def field(self) -> str:
        return f"data.{self.section}.{self.source}"

    def shown_inputs(self) -> str:
        """The inputs as a line names them: the first few, then how many more."""
        more = len(self.inputs) - SHOWN_INPUTS
        return ", ".join(self.inputs[:SHOWN_INPUTS]) + (f" and {more} more" if more > 0 else "")

    def plan_line(self, built: bool = False) -> str:
        """What a dry run says of it: built already, or to be built from what."""
        if built:
            return f"{self.field}: {self.store} is built already (from {self.shown_inputs()})"
        return f"{self.field}: {self.store} is to be built from {self.shown_inputs()}"

    def is_built(self) -> bool:
        """Whether a finished store is at ``store`` (its manifest is written last); an unreachable bucket or
        refused credentials are a ``StorageError`` said in about a second."""
        return first_contact(Location.parse(self.store), lambda directory: directory.exists(MANIFEST))


@dataclasses.dataclass(frozen=True)
class BuildOutcome:
    """How one source's build ended: its line (the build's summary, or what stopped it) and whether it
    failed."""

    source: str
    line: str
    failed: bool = False
    skipped: bool = False  # built already: nothing was done


def store_builds(config: RunConfig) -> list[StoreBuild]:
    """The sources of ``config`` whose stores are built from raw inputs, in the config's order (none when
    ``data.stores`` or ``data.corpus`` replaces ``data.sources``), then its eval sets that are."""
    data = config.data
    sources = {} if data.stores or data.corpus is not None else data.sources
    return [
        StoreBuild(name, tuple(each.build_from), each.store, section)
        for section, named in (("sources", sources), ("eval_sets", data.eval_sets))
        for name, each in named.items()
        if each.build_from is not None and each.store is not None
    ]


def planned_lines(config: RunConfig) -> list[BuildOutcome]:
    """A dry run: per source with ``build_from``, its inputs, its store and whether it is built already (a
    store that cannot be looked at is a failed line); nothing is built or written."""
    outcomes = []
    for build in store_builds(config):
        try:
            outcomes.append(BuildOutcome(build.source, build.plan_line(build.is_built())))
        except DatastoreError as error:
            line = f"{build.plan_line()}, but it cannot be looked at: {error}"
            outcomes.append(BuildOutcome(build.source, line, failed=True))
    return outcomes


def build_missing_stores(
    config: RunConfig,
    *,
    cluster: str | None = None,
    say: Callable[[str], object] = _on_stderr,
    done: Callable[[BuildOutcome], object] = lambda outcome: _on_stderr(outcome.line),
) -> list[BuildOutcome]:
    """Build every store of ``config``'s sources with ``build_from`` that is not built yet, side by side, on
    the Ray cluster at ``cluster`` (None: in this machine's processes); each source's outcome, in the
    config's order, each given to ``done`` as it ends. ``say`` tells what starts. The stores are tokenized
    with the run's tokenizer (``data.tokenizer``, given a chat template's tokens when a source holds chat),
    read as the source's ``format`` and ``subset`` and the ``data`` build options say. A missing tokenizer
    is a ``ConfigError``; each source's own problem is its failed outcome.

    >>> from meltemi.trainer.config import RunConfig
    >>> build_missing_stores(RunConfig())
    []
    """
    outcomes: dict[str, BuildOutcome] = {}
    todo: list[StoreBuild] = []
    for build in store_builds(config):
        try:
            if not build.is_built():
                todo.append(build)
                continue
            line = f"{build.field}: {build.store}: already built; skipped"
            outcomes[build.source] = BuildOutcome(build.source, line, skipped=True)
        except DatastoreError as error:
            outcomes[build.source] = BuildOutcome(build.source, f"{build.field}: {error}", failed=True)
        done(outcomes[build.source])
    if todo:
        chats = any(getattr(config.data, one.section)[one.source].format == "chat" for one in todo)
        recipe = chat_recipe(config) if chats else None  # data.chat, resolved once for every build
        tokenizer = _run_tokenizer(config, todo, say, recipe)
        with SideBySideBuilds([one.field for one in todo]) as shown:
            run = _Builds(config, tokenizer, _builder(cluster), cluster is None, len(todo), recipe, shown)
            outcomes |= _side_by_side(todo, run.build, say, done)
    return [outcomes[build.source] for build in store_builds(config)]


def _run_tokenizer(
    config: RunConfig, todo: list[StoreBuild], say: Callable[[str], object], recipe: ChatRecipe | None
) -> str:
    """The tokenizer the run trains with, which its stores are built with (given ``recipe``'s tokens)."""
    if config.data.tokenizer is None:
        raise ConfigError(
            f"data.tokenizer: {todo[0].field}.build_from is tokenized with the run's tokenizer: name it "
            "(--data.tokenizer TOKENIZER_JSON, a model directory holding one, or stdlib)"
        )
    data = config.data.model_copy(update={"tokenizer": tokenizer_file(config.data.tokenizer)})
    tokenizer, _ = tokenizer_for_stores(config.model_copy(update={"data": data}), say, recipe)
    return tokenizer


def _builder(cluster: str | None) -> Callable[..., BuildReport]:
    """``build_store``, on the Ray cluster at ``cluster`` when one is named."""
    from functools import partial

    from meltemi.datastore import build_store

    if cluster is None:
        return build_store
    if "cluster" not in inspect.signature(build_store).parameters:
        raise ConfigError(
            f"--ray {cluster}: this meltemi-datastore builds on this machine only (no cluster=)"
        )
    _connect(cluster)
    return partial(build_store, cluster=cluster)


def _connect(cluster: str) -> None:
    """Connect this process to the Ray cluster at ``cluster`` (``auto`` or ``HOST:PORT``) from this thread,
    once, before the builds' threads share the connection: Ray connects a process once, and two threads
    connecting at a time collide. Nothing answering is a one-line ``TrainerError``, said in seconds."""
    try:
        import ray
    except ModuleNotFoundError:
        raise ConfigError(
            f"--ray {cluster}: Ray is not installed; pip install 'meltemi-datastore[ray]'"
        ) from None
    if ray.is_initialized():
        return
    if cluster != "auto":
        host, _, port = cluster.rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=10).close()
        except (OSError, ValueError) as error:
            raise TrainerError(f"--ray {cluster}: no Ray cluster answers there ({error})") from None
    try:
        ray.init(address=cluster, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TrainerError(f"--ray {cluster}: no Ray cluster answers there ({first})") from None


def _side_by_side(
    todo: list[StoreBuild],
    build: Callable[[StoreBuild], BuildOutcome],
    say: Callable[[str], object],
    done: Callable[[BuildOutcome], object],
) -> dict[str, BuildOutcome]:
    """``build`` of every one of ``todo``, a thread each, each outcome given to ``done`` as it ends. The
    threads are daemons: an interrupted command ends without waiting for them (a build resumes)."""
    ended: queue.Queue[tuple[BuildOutcome, BaseException | None]] = queue.Queue()

    def run(one: StoreBuild) -> None:
        try:
            ended.put((build(one), None))
        except BaseException as error:  # a bug, not a bad source: raised again once the others end
            ended.put(
                (BuildOutcome(one.source, f"{one.field}: {type(error).__name__}: {error}", True), error)
            )

    for one in todo:
        say(f"{one.field}: building {one.store} from {one.shown_inputs()}")
        threading.Thread(target=run, args=(one,), name=f"build-{one.source}", daemon=True).start()
    outcomes, unexpected = {}, None
    for _ in todo:
        outcome, error = ended.get()
        outcomes[outcome.source] = outcome
        unexpected = unexpected or error
        done(outcome)
    if unexpected is not None:
        raise unexpected
    return outcomes


@dataclasses.dataclass(frozen=True)
class _Builds:
    """How this command builds each store: the run's data options, its tokenizer, ``build_store`` (on a
    cluster or not), how many builds share this machine's processors (``local``: the units run here), and
    the chat recipe (``data.chat`` resolved) when a store holds conversations, and the display that shows
    several builds at once (one alone draws its own bar)."""

    config: RunConfig
    tokenizer: str
    build_store: Callable[..., BuildReport]
    local: bool
    count: int
    recipe: ChatRecipe | None = None
    shown: SideBySideBuilds | None = None

    def build(self, one: StoreBuild) -> BuildOutcome:
        """One source's store built; a problem of its inputs, tokenizer or store is its failed outcome, said
        in the command's flags."""
        data = self.config.data
        source = getattr(data, one.section)[one.source]
        flags = {k: v for k, v in SOURCE_FLAGS.items() if k != "overwrite"}  # a store is never overwritten
        flags["subset"] = f"--{one.field}.subset {{}}"
        if source.text_field is not None:
            flags["text_field"] = f"--{one.field}.text_field {{}}"
        if source.format == "chat":
            flags["text_field"] = MESSAGES_FLAG
        workers = max(1, (os.cpu_count() or 1) // self.count) if self.local else 1
        in_memory = Location.parse(one.store).scheme == "memory"  # one process's: built in it
        try:
            report = self.build_store(
                list(one.inputs),
                self.tokenizer,
                one.store,
                skip_bad_lines=data.skip_bad_lines,
                invalid_utf8=data.invalid_utf8,
                workers=1 if in_memory else workers,
                progress=self.shown.reporter(one.field) if self.count > 1 and self.shown else True,
                **format_options(self.config, source, self.recipe),
            )
        except (DatastoreError, TrainerError) as error:
            said = str(in_command_words(error, flags) if isinstance(error, DatastoreError) else error)
            return BuildOutcome(one.source, f"{one.field}: {' '.join(said.split())}", failed=True)
        return BuildOutcome(one.source, f"{one.field}: {report.summary()}")


def failed_builds(outcomes: list[BuildOutcome]) -> DataError | None:
    """One ``DataError`` naming every source whose store could not be built (None when all were).

    >>> str(failed_builds([BuildOutcome("a", "data.sources.a: x: no such file", True)]))
    'data.sources.a: x: no such file'
    >>> failed_builds([BuildOutcome("a", "data.sources.a: built")]) is None
    True
    """
    failed = [outcome.line for outcome in outcomes if outcome.failed]
    if not failed:
        return None
    if len(failed) == 1:
        return DataError(failed[0])
    return DataError(f"{len(failed)} stores could not be built: {'; '.join(failed)}")
