"""A build's plan: its inputs fingerprinted (in parallel, by the executor's tasks), and its units of work.

Each input's size, SHA-256 and line-aligned cuts come from reading it once, inside a task, so a corpus of
many files is read by the whole cluster at once; a file whose stamp (a local file's size and modification
time, a bucket object's generation or ETag: `inputs.files.stamp_of`) is what an earlier plan or manifest
recorded is not read again. Units are runs of the inputs' pieces of about `unit_bytes`, decided from the
sizes alone, so they never depend on how many workers there are.
"""

from __future__ import annotations

from collections.abc import Sequence

from meltemi.datastore.build.executors import Executor
from meltemi.datastore.build.inputs.files import (
    Piece,
    Source,
    cut_at_lines,
    describe_source,
    redact,
    stamp_of,
)
from meltemi.datastore.build.records import BuildOptions, Plan, SourceRecord
from meltemi.datastore.build.units import TokenizerInfo
from meltemi.datastore.layout import FORMAT_VERSION
from meltemi.datastore.progress import ProgressBar, Shown

MIN_UNIT_BYTES = 64 << 10
UNITS_PER_CORPUS = 16
FILES_PER_TASK = 16  # inputs fingerprinted by one task, at most


def fingerprint_files(
    urls: Sequence[str], split_bytes: int | None, known: Sequence[SourceRecord | None]
) -> list[Source]:
    """Each input as a `Source` (one task's share of the inputs): what `known` recorded of it when its
    stamp is still the same (and its cuts are known, or it needs none), else read whole.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> _ = path.write_text("one")
    >>> first = fingerprint_files([str(path)], None, [None])[0]
    >>> record = SourceRecord(first.name, first.size, first.sha256, first.stamp, [])
    >>> from dataclasses import replace
    >>> fingerprint_files([str(path)], None, [replace(record, sha256="kept")])[0].sha256
    'kept'
    """
    sources = []
    for url, record in zip(urls, known, strict=True):
        if record is not None and record.stamp is not None and record.stamp == stamp_of(url):
            cuts = record.cuts
            if cuts is None and not _may_be_cut(url, record.size, split_bytes):
                cuts = []
            if cuts is not None:
                pairs = tuple((int(offset), int(lines)) for offset, lines in cuts)
                sources.append(Source(url, record.size, record.sha256, pairs, record.stamp))
                continue
        sources.append(describe_source(url, split_bytes=split_bytes))
    return sources


def _may_be_cut(url: str, size: int, split_bytes: int | None) -> bool:
    return split_bytes is not None and cut_at_lines(url) and size > split_bytes


def fingerprint(
    urls: Sequence[str],
    split_bytes: int | None,
    known: Sequence[SourceRecord],
    executor: Executor,
    progress: Shown,
) -> list[Source]:
    """Every input as a `Source`, in the order of `urls`, fingerprinted by `executor`'s tasks; `known`
    holds what an earlier plan or manifest recorded (by the name it records, credentials masked)."""
    by_name = {record.url: record for record in known}
    per_task = max(1, min(FILES_PER_TASK, len(urls) // max(1, 4 * executor.workers)))
    jobs = [
        (list(urls[i : i + per_task]), split_bytes, [by_name.get(redact(u)) for u in urls[i : i + per_task]])
        for i in range(0, len(urls), per_task)
    ]
    found: dict[str, Source] = {}
    with ProgressBar(len(urls), "reading inputs", enabled=progress if len(jobs) > 1 else False) as bar:
        for sources in executor.run(fingerprint_files, jobs):
            for source in sources:
                found[source.url] = source
            bar.advance(len(sources))
    return [found[url] for url in urls]


def plan_units(info: TokenizerInfo, sources: list[Source], options: BuildOptions, command: str) -> Plan:
    """Sources, tokenizer and options, and the units of work: runs of source pieces.

    A unit holds about `unit_bytes` of input, or less for a small corpus, so that it still makes at least
    `UNITS_PER_CORPUS` units and workers share the work evenly. Units depend only on the inputs and
    options, never on the worker count.
    """
    pieces = [(index, piece) for index, source in enumerate(sources) for piece in source.pieces()]
    total = sum(piece.size for _, piece in pieces)
    target = min(options.unit_bytes, max(MIN_UNIT_BYTES, total // UNITS_PER_CORPUS))
    units, unit, size = [], [], 0
    for position, (index, piece) in enumerate(pieces):
        unit.append((index, piece.start, piece.stop, piece.first_line))
        size += piece.size
        if size >= target or position == len(pieces) - 1:
            units.append(tuple(unit))
            unit, size = [], 0
    return Plan(
        format_version=FORMAT_VERSION,
        tokenizer=info.identity(),
        options=options,
        sources=tuple(
            SourceRecord(s.name, s.size, s.sha256, s.stamp, [list(cut) for cut in s.cuts]) for s in sources
        ),
        units=tuple(units),
        command=command,
    )


def unit_pieces(unit: Sequence[Sequence], sources: list[Source]) -> list[Piece]:
    """The pieces of sources one unit reads."""
    return [Piece(sources[index], start, stop, first_line) for index, start, stop, first_line in unit]


def unit_groups(todo: list[int], units: Sequence, sources: list[Source], group_bytes: int) -> list[list[int]]:
    """Consecutive units of about `group_bytes` of input together: one process tokenizes them in one go."""
    groups, group, size = [], [], 0
    for unit in todo:
        group.append(unit)
        size += sum(piece.size for piece in unit_pieces(units[unit], sources))
        if size >= group_bytes:
            groups.append(group)
            group, size = [], 0
    return groups + [group] if group else groups
