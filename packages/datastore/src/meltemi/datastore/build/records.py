"""The typed records of a build: its plan (`.build/plan.json`), each part's summary, and its report.

Both are JSON on disk (plain, no pickle) and dataclasses in memory; `to_json` and `from_json` convert,
and read what earlier versions of this library wrote.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from meltemi.datastore.layout import MANIFEST
from meltemi.datastore.progress import human

SHOWN_FILES = 3  # files (or lines) named in a summary; the manifest lists them all
EARLIER_INVALID_UTF8 = "replace"  # what builds did with invalid UTF-8 before they recorded a policy
_DONE = {"skip": "skipped", "replace": "replaced", "error": "found"}

UnitPiece = tuple[int, int, int | None, int]
"""One piece of a unit of work: source index, first byte, stop byte (None: to the end), first line."""


@dataclass(frozen=True)
class BuildOptions:
    """The options that decide a store's bytes: a different value means a different store.

    >>> BuildOptions("text", True, 1024, 1048576, 4194304).to_json()["chunk_tokens"]
    1024
    """

    text_field: str
    eos: bool
    chunk_tokens: int
    shard_tokens: int
    unit_bytes: int
    chat: dict[str, Any] | None = None  # a chat store's template hash and choices (ChatRecipe.identity)

    def to_json(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        if self.chat is None:  # a text store's options read as they did before chat stores
            del record["chat"]
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> BuildOptions:
        return cls(**record)


@dataclass(frozen=True)
class SourceRecord:
    """A source as a plan and a manifest record it: URL (credentials masked), size, content hash, the stamp
    it had when read (`inputs.files.stamp_of`: a later build that finds the same stamp reads it no more),
    and in a plan its line-aligned cuts (`[byte offset, lines before it]`; None where not recorded)."""

    url: str
    size: int
    sha256: str
    stamp: str | None = None
    cuts: list[list[int]] | None = None

    def identity(self) -> dict[str, int | str]:
        """What decides the store's bytes: its size and content hash (not the stamp: a file touched but
        not changed is the same source)."""
        return {"size": self.size, "sha256": self.sha256}

    def to_manifest(self) -> dict[str, object]:
        """The manifest's record of it (no cuts: they follow from the bytes and the unit size)."""
        return {"url": self.url, "size": self.size, "sha256": self.sha256, "stamp": self.stamp}


@dataclass(frozen=True)
class Plan:
    """Everything a build decided before tokenizing: what it reads, with what, and its units of work."""

    format_version: int
    tokenizer: dict[str, Any]
    options: BuildOptions
    sources: tuple[SourceRecord, ...]
    units: tuple[tuple[UnitPiece, ...], ...]
    command: str

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "tokenizer": self.tokenizer,
            "options": self.options.to_json(),
            "sources": [dataclasses.asdict(s) for s in self.sources],
            "units": [[list(piece) for piece in unit] for unit in self.units],
            "command": self.command,
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Plan:
        return cls(
            format_version=record["format_version"],
            tokenizer=record["tokenizer"],
            options=BuildOptions.from_json(record["options"]),
            sources=tuple(SourceRecord(**s) for s in record["sources"]),
            units=tuple(tuple(tuple(piece) for piece in unit) for unit in record["units"]),
            command=record["command"],
        )


OTHER_SPLIT_FILES = "other_split_files"  # a chat data set's files of splits other than train, not read


def count_phrase(
    key: str, count: int, invalid_utf8: str, split: str | None = None, subset: str | None = None
) -> str:
    """A count of a summary in words: `count_phrase("invalid_utf8_documents", 2, "skip")` is
    `'2 documents with invalid UTF-8 skipped'`, `count_phrase("empty_files", 1, "error")` `'1 empty file'`."""
    if key == "invalid_utf8_documents":
        return f"{count} document{'s' * (count != 1)} with invalid UTF-8 {_DONE[invalid_utf8]}"
    if key == OTHER_SPLIT_FILES:
        return (
            f"{count} file{'s' * (count != 1)} of the data set's other splits left out (its "
            f"{split or 'train'} split{f' of subset {subset}' if subset else ''} read)"
        )
    words = key.replace("_", " ")
    return f"{count} {words if count != 1 else words.removesuffix('s')}"


@dataclass(frozen=True)
class PartSummary:
    """What one unit of work produced: documents, tokens, and what it skipped or repaired, and where, and
    the `invalid_utf8` policy it was read under (a resumed build redoes a part whose documents that are not
    UTF-8 were handled under another policy).

    >>> summary = PartSummary(3, documents=2, tokens=9, invalid_utf8_files=("a.txt",), invalid_utf8="skip")
    >>> PartSummary.from_json(summary.to_json()) == summary
    True
    """

    unit: int
    documents: int
    tokens: int
    counts: dict[str, int] = field(default_factory=dict)
    invalid_utf8_files: tuple[str, ...] = ()
    skipped_lines: tuple[str, ...] = ()
    invalid_utf8: str = "error"

    def fits(self, invalid_utf8: str) -> bool:
        """Whether the part is what reading under the policy `invalid_utf8` makes."""
        return self.invalid_utf8 == invalid_utf8 or not self.counts.get("invalid_utf8_documents")

    def to_json(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        record["invalid_utf8_files"] = list(self.invalid_utf8_files)
        record["skipped_lines"] = list(self.skipped_lines)
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> PartSummary:
        return cls(
            unit=record["unit"],
            documents=record["documents"],
            tokens=record["tokens"],
            counts=dict(record.get("counts", {})),
            invalid_utf8_files=tuple(record.get("invalid_utf8_files", ())),
            skipped_lines=tuple(record.get("skipped_lines", ())),
            invalid_utf8=record.get("invalid_utf8", EARLIER_INVALID_UTF8),
        )


@dataclass
class BuildReport:
    """What a build did: counts of documents and tokens, what it skipped or repaired and where, its time.

    `invalid_utf8` is the policy for documents that are not UTF-8 (`counts["invalid_utf8_documents"]` of
    them, skipped or repaired), `invalid_utf8_files` names every file with one, and `skipped_lines` every
    JSONL line skipped with `skip_bad_lines`; the manifest records them all.

    >>> BuildReport("s", 5, 90, {"invalid_utf8_documents": 2}, 1.0, invalid_utf8="skip").summary()
    's: built 5 docs, 90 tokens in 1.0s (90 tokens/s), 2 documents with invalid UTF-8 skipped'
    """

    out: str
    documents: int
    tokens: int
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    already_built: bool = False
    invalid_utf8_files: list[str] = field(default_factory=list)
    skipped_lines: list[str] = field(default_factory=list)
    invalid_utf8: str = "error"
    format: str = "text"
    split: str | None = None  # a chat data set's split read, when its files name others
    other_splits: dict[str, int] = field(default_factory=dict)  # their files left out, by split
    subset: str | None = None  # the subset of a chat data set's card read, when its card names subsets
    where: str = "this process"  # what ran the tasks (`Executor.where`)
    nodes: int = 1  # the machines that ran them
    repeated_units: int = 0  # units started more than once: a worker lost, or the build run again
    kept_units: int = 0  # units an earlier build, stopped, had tokenized: this one went on from them

    def items(self, count: float) -> str:
        """What the store's documents are called: ``docs``, or a chat store's ``conversations``."""
        return ("conversation" if self.format == "chat" else "doc") + "s" * (count != 1)

    def notes(self) -> str:
        """The counts of what the build skipped or repaired, in words (empty when none)."""
        counts = sorted((k, n) for k, n in self.counts.items() if n)
        return ", ".join(count_phrase(k, n, self.invalid_utf8, self.split, self.subset) for k, n in counts)

    def summary(self) -> str:
        notes = f", {self.notes()}" if self.notes() else ""
        if self.already_built:
            size = f"{human(self.documents)} {self.items(self.documents)}, {human(self.tokens)} tokens{notes}"
            return f"{self.out}: already built ({size}); nothing to do"
        rate = self.tokens / max(self.seconds, 1e-9)
        line = (
            f"{self.out}: built {self.documents:,} {self.items(self.documents)}, {self.tokens:,} tokens in "
            f"{self.seconds:.1f}s "
            f"({human(rate)} tokens/s){notes}"
        )
        kept = self.kept_units
        if kept:
            line += f"; went on from {kept} unit{'s' * (kept != 1)} an earlier build made"
        if self.nodes > 1 or self.repeated_units:
            again, why = self.repeated_units, "a worker lost" + (", or the build stopped" if kept else "")
            line += f"\n  tasks ran on {self.nodes} node{'s' * (self.nodes != 1)} of {self.where}"
            line += f"; {again} unit{'s' * (again != 1)} ran more than once ({why})" if again else ""
        for what, where in (("invalid UTF-8 in", self.invalid_utf8_files), ("skipped", self.skipped_lines)):
            if where:
                more = f" and {len(where) - SHOWN_FILES} more" if len(where) > SHOWN_FILES else ""
                line += f"\n  {what}: {'; '.join(where[:SHOWN_FILES])}{more} (all in {MANIFEST})"
        return line
