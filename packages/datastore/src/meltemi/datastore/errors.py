"""The errors a user of the token store can cause, each saying what went wrong and where."""

import functools


class DatastoreError(Exception):
    """Base class: every error the datastore raises on purpose is one of these."""


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
    ):
        super().__init__(message)
        self.file, self.offset, self.line, self.row = file, offset, line, row

    def with_message(self, message: str) -> "InvalidUtf8Error":
        """The same error, said with `message` (a hint added, say)."""
        return type(self)(message, file=self.file, offset=self.offset, line=self.line, row=self.row)

    def __reduce__(self):  # keyword arguments survive the trip back from a worker process
        where = {"file": self.file, "offset": self.offset, "line": self.line, "row": self.row}
        return functools.partial(type(self), **where), self.args


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
