"""A datastore error said to this command's user: its remedies (`build_store` keywords, carried as data by
`meltemi.datastore.DatastoreError`) in the command's own flags (``--data.skip_bad_lines true``), and a build
run again as "run the same command again", never the datastore command line's flags."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from meltemi.datastore.errors import DatastoreError, Rerunnable

RERUN = "run the same command again"


@dataclasses.dataclass(frozen=True)
class CommandWords:
    """How this command's user sets ``build_store``'s options (a ``meltemi.datastore.Wording``): ``flags``
    maps a keyword to the flag that sets it, a format string whose ``{}`` takes the value; a keyword left out
    is not the user's to change, and a remedy that needs it is not offered.

    >>> words = CommandWords({"skip_bad_lines": "--data.skip_bad_lines {}"})
    >>> words.flag("skip_bad_lines", True), words.flag("eos", False)
    ('--data.skip_bad_lines true', None)
    >>> words.rerun({"skip_bad_lines": True}, None), words.rerun({}, None)
    ('run the same command again with --data.skip_bad_lines true', 'run the same command again')
    """

    flags: Mapping[str, str]

    def flag(self, keyword: str, value: Any) -> str | None:
        spelled = self.flags.get(keyword)
        if spelled is None:
            return None
        return spelled.format(str(value).lower() if isinstance(value, bool) else value)

    def rerun(self, changes: Mapping[str, Any], request: Rerunnable | None) -> str | None:
        flags = [self.flag(keyword, value) for keyword, value in changes.items()]
        if None in flags:
            return None
        return RERUN + (f" with {' '.join(flags)}" if flags else "")  # type: ignore[arg-type]


def in_command_words(error: DatastoreError, flags: Mapping[str, str]) -> DatastoreError:
    """``error`` (its type, cause and remedies kept) said with this command's ``flags`` (see `CommandWords`).

    >>> from meltemi.datastore import Remedy, SourceChangedError, Way
    >>> rebuild = Remedy("; pass {}", (Way({"overwrite": True}, " to rebuild it"),), otherwise="; move it")
    >>> error = SourceChangedError("a.jsonl changed", remedies=(rebuild,))
    >>> str(in_command_words(error, {"overwrite": "--data.rebuild_corpus true"}))
    'a.jsonl changed; pass --data.rebuild_corpus true to rebuild it'
    >>> str(error)
    'a.jsonl changed; pass --overwrite to rebuild it'
    >>> str(in_command_words(error, {}))
    'a.jsonl changed; move it'
    """
    return error.worded(CommandWords(flags))
