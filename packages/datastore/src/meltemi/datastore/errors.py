"""The errors a user of the token store can cause, each saying what went wrong and where."""


class DatastoreError(Exception):
    """Base class: every error the datastore raises on purpose is one of these."""


class InputError(DatastoreError):
    """An input path, file or line cannot be read as documents (the message names the file and line)."""


class BadLineError(InputError):
    """A JSONL line is not a JSON object with a string text field (the message names the file and line).

    The build stops at it; fix the line, or build with `skip_bad_lines=True` (`--skip-bad-lines`) to skip
    such lines, counted and named in the manifest.
    """


class EmptyCorpusError(DatastoreError):
    """The inputs hold no non-empty document, so there is nothing to build."""


class SourceChangedError(DatastoreError):
    """A source file differs from the one an existing (or half-built) store was made from."""


class IncompleteStoreError(DatastoreError):
    """The store's build has not finished; the message says how far it got and how to finish it."""


class IntegrityError(DatastoreError):
    """A chunk read from the store is corrupted or missing (the message names the file and chunk)."""


class TokenizerMismatchError(DatastoreError):
    """The store was built with a different tokenizer than the caller expects."""
