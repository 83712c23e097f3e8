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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> BuildOptions:
        return cls(**record)


@dataclass(frozen=True)
class SourceRecord:
    """A source as a plan and a manifest record it: URL (credentials masked), size, content hash."""

    url: str
    size: int
    sha256: str


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


@dataclass(frozen=True)
class PartSummary:
    """What one unit of work produced: documents, tokens, and what it skipped or repaired, and where.

    >>> summary = PartSummary(3, documents=2, tokens=9, invalid_utf8_files=("a.txt",))
    >>> PartSummary.from_json(summary.to_json()) == summary
    True
    """

    unit: int
    documents: int
    tokens: int
    counts: dict[str, int] = field(default_factory=dict)
    invalid_utf8_files: tuple[str, ...] = ()
    skipped_lines: tuple[str, ...] = ()

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
        )


@dataclass
class BuildReport:
    """What a build did: counts of documents and tokens, what it skipped or repaired and where, its time.

    `invalid_utf8_files` names every file with a document whose invalid UTF-8 was replaced (U+FFFD), and
    `skipped_lines` every JSONL line skipped with `skip_bad_lines`; the manifest records both.
    """

    out: str
    documents: int
    tokens: int
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    already_built: bool = False
    invalid_utf8_files: list[str] = field(default_factory=list)
    skipped_lines: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.already_built:
            size = f"{human(self.documents)} docs, {human(self.tokens)} tokens"
            return f"{self.out}: already built ({size}); nothing to do"
        notes = "".join(f", {n} {k.replace('_', ' ')}" for k, n in sorted(self.counts.items()) if n)
        rate = self.tokens / max(self.seconds, 1e-9)
        line = (
            f"{self.out}: built {self.documents:,} docs, {self.tokens:,} tokens in {self.seconds:.1f}s "
            f"({human(rate)} tokens/s){notes}"
        )
        for what, where in (("invalid UTF-8 in", self.invalid_utf8_files), ("skipped", self.skipped_lines)):
            if where:
                more = f" and {len(where) - SHOWN_FILES} more" if len(where) > SHOWN_FILES else ""
                line += f"\n  {what}: {'; '.join(where[:SHOWN_FILES])}{more} (all in {MANIFEST})"
        return line
