"""The errors a user of the token store can cause, each saying what went wrong and where (its `cause`) and
what would fix it (its `remedies`: data, which a command line words with its own flags)."""

from __future__ import annotations

import copy
import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class Rerunnable(Protocol):
    """A build as it was asked for (`build.request.BuildRequest`): the command line that runs it again."""

    def command(self, **changes: Any) -> str: ...


class Wording(Protocol):
    """How a program's user sets `build_store`'s options, so that a remedy names that program's flags."""

    def flag(self, keyword: str, value: Any) -> str | None:
        """How the user sets `keyword` to `value` (`--skip-bad-lines`); None when they cannot."""
        ...

    def rerun(self, changes: Mapping[str, Any], request: Rerunnable | None) -> str | None:
        """How the user runs the same build again with `changes` (none: as it was); None when they cannot."""
        ...


@dataclass(frozen=True)
class Way:
    """One change that fixes an error: `build_store` keywords and their values (a value in capitals, such as
    `"FIELD"`, stands for the user's choice), and what the change does (`" to rebuild it"`)."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    purpose: str = ""


@dataclass(frozen=True)
class Remedy:
    """What would fix an error, as data: `ways` to change the build (alternatives), made by setting them, or
    with `rerun` by running the same build again with them (no ways: as it was). `words` is the phrase, its
    `{}` standing for how the user does that; `otherwise` is said instead when their program offers none.

    >>> rebuild = Remedy("; pass {}", (Way({"overwrite": True}, " to rebuild it"),), otherwise="; start over")
    >>> rebuild.say(COMMAND_LINE)
    '; pass --overwrite to rebuild it'
    >>> Remedy.from_json(rebuild.to_json()) == rebuild
    True
    """

    words: str
    ways: tuple[Way, ...] = ()
    rerun: bool = False
    otherwise: str = ""

    def say(self, wording: Wording, request: Rerunnable | None = None) -> str:
        """The phrase in `wording`'s flags (a rerun's command from `request`)."""
        said = []
        for way in self.ways or (Way(),):
            if self.rerun:
                how = wording.rerun(way.settings, request)
            else:
                flags = [wording.flag(keyword, value) for keyword, value in way.settings.items()]
                how = None if None in flags or not flags else " ".join(flags)  # type: ignore[arg-type]
            said += [] if how is None else [how + way.purpose]
        return self.words.format(" or ".join(said)) if said else self.otherwise

    def to_json(self) -> dict[str, Any]:
        ways = [{"settings": dict(way.settings), "purpose": way.purpose} for way in self.ways]
        return {"words": self.words, "ways": ways, "rerun": self.rerun, "otherwise": self.otherwise}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Remedy:
        ways = tuple(Way(way["settings"], way["purpose"]) for way in record["ways"])
        return cls(record["words"], ways, record["rerun"], record["otherwise"])


class CommandLine:
    """The datastore's own command line (`python -m meltemi.datastore build`), in whose flags `str(error)`
    says a remedy: a keyword's flag is its name in kebab case (`build.request.BUILD_FLAGS` spells the
    remedies' keywords so, which a test checks), and a rerun is the whole command.

    >>> COMMAND_LINE.flag("invalid_utf8", "skip"), COMMAND_LINE.flag("eos", False)
    ('--invalid-utf8 skip', '--no-eos')
    """

    def flag(self, keyword: str, value: Any) -> str | None:
        name = keyword.replace("_", "-")
        if isinstance(value, bool):
            return f"--{name}" if value else f"--no-{name}"
        return shlex.join([f"--{name}", str(value)])

    def rerun(self, changes: Mapping[str, Any], request: Rerunnable | None) -> str | None:
        if request is None:
            return None if changes else "run the build again"
        return request.command(**changes) if changes else f"run the build again ({request.command()})"


COMMAND_LINE = CommandLine()


class DatastoreError(Exception):
    """Base class: every error the datastore raises on purpose is one of these. `cause` says what went wrong
    and where; `remedies` what would fix it, as data (`request`: the build they would run again). `str`
    words them for the datastore's command line; `worded` gives the same error in another program's flags.

    >>> rebuild = Remedy("; pass {}", (Way({"overwrite": True}),))
    >>> error = DatastoreError("x.jsonl changed", remedies=(rebuild,))
    >>> str(error), error.cause
    ('x.jsonl changed; pass --overwrite', 'x.jsonl changed')
    """

    def __init__(
        self, cause: str = "", *, remedies: Sequence[Remedy] = (), request: Rerunnable | None = None
    ):
        super().__init__(cause)
        self.remedies, self.request = tuple(remedies), request
        self.wording: Wording | None = None

    @property
    def cause(self) -> str:
        """What went wrong and where, without the remedies."""
        return str(self.args[0]) if self.args else ""

    def say(self, wording: Wording) -> str:
        """The cause and the remedies, in `wording`'s flags."""
        return self.cause + "".join(remedy.say(wording, self.request) for remedy in self.remedies)

    def __str__(self) -> str:
        return self.say(self.wording or COMMAND_LINE)

    def worded(self, wording: Wording) -> DatastoreError:
        """The same error (its type, cause and remedies), said in `wording`'s flags."""
        other = copy.copy(self)
        other.wording = wording
        return other.with_traceback(self.__traceback__)

    def with_remedies(self, *remedies: Remedy, request: Rerunnable | None = None) -> DatastoreError:
        """The same error with `remedies` after its own, and the build they would run again."""
        other = copy.copy(self)
        other.remedies, other.request = self.remedies + remedies, request or self.request
        return other


class InputError(DatastoreError):
    """An input path, file or line cannot be read as documents (the message names the file and line)."""


class BadLineError(InputError):
    """A JSONL line is not a JSON object with a string text field (the message names the file and line).

    The build stops at it; fix the line, or build with `skip_bad_lines=True` (`--skip-bad-lines`) to skip
    such lines, counted and named in the manifest.
    """


class InvalidUtf8Error(InputError):
    """A document is not UTF-8 text (a binary file, say): the message names the file, the byte (`offset`),
    and for JSONL the line (`line`), for Parquet the row (`row`).

    The build stops at it, keeping the work done; build with `invalid_utf8="skip"` to leave such documents
    out or `"replace"` to replace their undecodable bytes with U+FFFD, counted in the summary and manifest.

    >>> error = InvalidUtf8Error("a.bin: not UTF-8 text at byte 0", file="a.bin", offset=0)
    >>> import pickle; pickle.loads(pickle.dumps(error)).offset
    0
    """

    def __init__(
        self,
        message: str,
        *,
        file: str,
        offset: int,
        line: int | None = None,
        row: int | None = None,
        remedies: Sequence[Remedy] = (),
    ):
        super().__init__(message, remedies=remedies)
        self.file, self.offset, self.line, self.row = file, offset, line, row

    def __reduce__(self):  # keyword arguments (and remedies) survive the trip back from a worker process
        where = {"file": self.file, "offset": self.offset, "line": self.line, "row": self.row}
        return functools.partial(type(self), **where), self.args, self.__dict__


class TokenizerFileError(InputError):
    """A `tokenizer.json` is missing, unreadable, or not a Hugging Face tokenizer (the message names it)."""


class ChatTemplateError(DatastoreError):
    """A chat template cannot be used: bad Jinja syntax, no `{% generation %}` blocks where they are
    needed, or a render that fails (the message names the template's source and the line)."""


class EmptyCorpusError(DatastoreError):
    """The inputs hold no non-empty document, so there is nothing to build."""


class SourceChangedError(DatastoreError):
    """A source file differs from the one an existing (or half-built) store was made from."""


class ClusterError(DatastoreError):
    """The Ray cluster a build was given cannot be reached, or lost a task more times than it retries."""


class BuildInProgressError(DatastoreError):
    """Another build holds the store's lease (on another host, or another process here): it is named."""


class NoSuchStoreError(DatastoreError):
    """A local store's directory does not exist (nothing was built there)."""


class IncompleteStoreError(DatastoreError):
    """The store's build has not finished; the message says how far it got and how to finish it."""


class IntegrityError(DatastoreError):
    """A chunk read from the store is corrupted or missing (the message names the file and chunk)."""


class TokenizerMismatchError(DatastoreError):
    """The store was built with a different tokenizer than the caller expects."""


class StorageError(DatastoreError):
    """A location (a local path, or a `gs://`, `s3://`, `file://` or `memory://` URL) cannot be used: the
    message names the URL and what failed. Each subclass is one mistake a user can make."""


class UnknownSchemeError(StorageError):
    """The URL's scheme is not one the storage seam reads and writes (`file`, `gs`, `s3`, `memory`)."""


class BadUrlError(StorageError):
    """The URL is malformed: a bucket URL without a bucket name, say."""


class BadBucketNameError(BadUrlError):
    """The URL's bucket name breaks the store's naming rules (`s3://b`: S3 names have 3 to 63 characters)."""


class CredentialsError(StorageError):
    """The environment names credentials that cannot be used: a credentials file that does not exist, an
    access key without its secret."""


class NoSuchBucketError(StorageError):
    """The URL's bucket does not exist (or the endpoint serves no bucket of that name)."""


class AccessDeniedError(StorageError):
    """The credentials were refused: unknown or wrong keys, or no permission on the bucket."""


class UnreachableError(StorageError):
    """The storage endpoint cannot be reached (connection refused, no route, name not resolved)."""


class PathIsAFileError(StorageError):
    """A local path that should be a directory is a file."""


class NotAFileError(StorageError):
    """A location named where a file is to be written names a folder (`evals/`, a local directory)."""


class OutOfRangeError(StorageError):
    """A byte range was asked of an object that does not hold it (the object is shorter): a file cut
    short, or a header that promises more bytes than follow it."""
