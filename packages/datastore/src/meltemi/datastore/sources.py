"""Input sources: resolve paths, globs and fsspec URLs to files in a stable order, and read documents.

Formats, by file name: `.jsonl` and `.jsonl.gz` (one JSON object per line, text in a field), `.parquet`
(text in a column), anything else plain text (one document per file). Documents come in sorted source
order, then in order within a source, so a build never depends on how the files were listed.
"""

import gzip
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import fsspec

from meltemi.datastore.errors import BadLineError, InputError

_GLOB_CHARS = "*?["
_HASH_BLOCK = 1 << 22


@dataclass(frozen=True)
class Source:
    """One input file: where it is, how big, the SHA-256 of its bytes, and where a big JSONL may be cut.

    `cuts` holds `(byte offset, lines before it)` of line starts that split the file into pieces of about
    the build's unit size, so one large JSONL file is tokenized by many workers.
    """

    url: str
    size: int
    sha256: str
    cuts: tuple[tuple[int, int], ...] = ()

    def pieces(self) -> list["Piece"]:
        """The file as consecutive pieces, split at `cuts` (one piece when there are none)."""
        starts = [(0, 0), *self.cuts]
        stops = [c for c, _ in self.cuts] + [None]
        return [
            Piece(self, start, stop, lines + 1) for (start, lines), stop in zip(starts, stops, strict=True)
        ]

    @property
    def name(self) -> str:
        """The URL with any credentials in it masked: what manifests, plans and messages record."""
        return redact(self.url)

    @property
    def kind(self) -> str:
        name = self.url.lower()
        if name.endswith(".jsonl.gz"):
            return "jsonl.gz"
        if name.endswith(".jsonl"):
            return "jsonl"
        if name.endswith(".parquet"):
            return "parquet"
        return "text"


def redact(url: str) -> str:
    """`url` (or any text) with the user and password of each URL masked, so secrets stay out of records.

    >>> redact("https://user:secret@example.com/a.jsonl"), redact("/data/a.jsonl")
    ('https://***@example.com/a.jsonl', '/data/a.jsonl')
    """
    return re.sub(r"([a-zA-Z][\w+.-]*://)[^/@\s'\"]*@", r"\1***@", url)


@dataclass(frozen=True)
class Piece:
    """Bytes `[start, stop)` of a source (`stop` None: to its end), whose first line is `first_line`."""

    source: Source
    start: int
    stop: int | None
    first_line: int

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop is None

    @property
    def size(self) -> int:
        return (self.source.size if self.stop is None else self.stop) - self.start


def _url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    return path if fs.protocol in ("file", ("file", "local")) else fs.unstrip_protocol(path)


def resolve_inputs(inputs: Sequence[str]) -> list[str]:
    """Every file named by `inputs` (files, directories, globs, URLs), sorted, without duplicates.

    >>> resolve_inputs([__file__]) == [__file__]
    True
    """
    if not inputs:
        raise InputError("no inputs given: pass at least one file, directory, glob or URL")
    found: set[str] = set()
    for item in inputs:
        try:
            found.update(_resolve(str(item)))
        except (ImportError, ValueError, OSError) as e:
            raise InputError(f"input {redact(str(item))!r}: cannot be listed ({redact(str(e))})") from None
    return sorted(found)


def _resolve(item: str) -> list[str]:
    fs, path = fsspec.core.url_to_fs(item)
    if any(c in path for c in _GLOB_CHARS):
        matches = [p for p in fs.glob(path) if fs.isfile(p)]
        if not matches:
            raise InputError(f"input {redact(item)!r}: the pattern matches no file")
    elif fs.isdir(path):
        matches = [p for p in fs.find(path) if not _hidden(p[len(path) :])]
        if not matches:
            raise InputError(f"input {redact(item)!r}: the directory holds no file")
    elif fs.isfile(path):
        matches = [path]
    else:
        raise InputError(f"input {redact(item)!r}: no such file or directory")
    return [_url(fs, p) for p in matches]


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/") if part)


def describe_source(url: str, split_bytes: int | None = None, block_bytes: int = _HASH_BLOCK) -> Source:
    """Size and content hash of one file (read once, in blocks); a plain JSONL file larger than
    `split_bytes` also gets line-aligned cuts about every `split_bytes`."""
    digest = hashlib.sha256()
    size = lines = 0
    cuts: list[tuple[int, int]] = []
    splitting = split_bytes is not None and url.lower().endswith(".jsonl")
    next_cut = split_bytes if splitting else None
    try:
        with fsspec.open(url, "rb") as f:
            while block := f.read(block_bytes):
                digest.update(block)
                while next_cut is not None and next_cut < size + len(block):
                    newline = block.find(b"\n", max(0, next_cut - size))
                    if newline < 0:
                        break
                    cuts.append((size + newline + 1, lines + block.count(b"\n", 0, newline + 1)))
                    next_cut = size + newline + 1 + split_bytes
                lines += block.count(b"\n")
                size += len(block)
    except OSError as e:
        raise InputError(f"{redact(url)}: cannot be read ({redact(str(e))})") from None
    cuts = [(offset, before) for offset, before in cuts if offset < size]
    return Source(url=url, size=size, sha256=digest.hexdigest(), cuts=tuple(cuts))


@dataclass
class ReadNotes:
    """What reading documents skipped or repaired: counts by kind, and where, so a user can fix the inputs.

    `counts` holds `empty_files`, `empty_documents`, `invalid_utf8_documents` and `skipped_lines`;
    `invalid_utf8_files` names each file with a repaired document, `skipped_lines` each line skipped
    (`"<file>, line <n>: <why>"`, only with `skip_bad_lines`).
    """

    counts: Counter = field(default_factory=Counter)
    invalid_utf8_files: set[str] = field(default_factory=set)
    skipped_lines: list[str] = field(default_factory=list)

    def repaired(self, source: Source) -> None:
        self.counts["invalid_utf8_documents"] += 1
        self.invalid_utf8_files.add(source.name)


def _decode(data: bytes, source: Source, notes: ReadNotes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        notes.repaired(source)
        return data.decode("utf-8", errors="replace")


def _without_surrogates(text: str, source: Source, notes: ReadNotes) -> str:
    """JSON may escape lone surrogates (`"\\ud800"`), which are not text: replace them, and note it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        notes.repaired(source)
        return text.encode("utf-8", errors="replace").decode("utf-8")
    return text


def read_documents(
    piece: Piece, text_field: str, notes: ReadNotes, skip_bad_lines: bool = False
) -> Iterator[str]:
    """The non-empty documents of a piece of a source, in file order; skipped and repaired ones noted.

    A JSONL line that is not a JSON object with a string `text_field` is a `BadLineError` naming the file
    and line, or, with `skip_bad_lines`, skipped and noted.

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> _ = path.write_text('{"text": "one"}\\nnot json\\n{"text": "two"}\\n')
    >>> notes = ReadNotes()
    >>> list(read_documents(describe_source(str(path)).pieces()[0], "text", notes, skip_bad_lines=True))
    ['one', 'two']
    >>> notes.counts["skipped_lines"], notes.skipped_lines[0].split(", ")[-1]
    (1, 'line 2: not valid JSON (Expecting value at column 1)')
    """
    kind = piece.source.kind
    if kind == "text":
        yield from _text_documents(piece.source, notes)
    elif kind == "parquet":
        yield from _parquet_documents(piece.source, text_field, notes)
    else:
        yield from _jsonl_documents(piece, text_field, notes, skip_bad_lines)


def _text_documents(source: Source, notes: ReadNotes) -> Iterator[str]:
    with fsspec.open(source.url, "rb") as f:
        data = f.read()
    if not data.strip():
        notes.counts["empty_files"] += 1
        return
    yield _decode(data, source, notes)


def _lines(f, piece: Piece) -> Iterator[bytes]:
    """The lines of `piece` from the open file `f` (a piece always starts and ends at a line boundary)."""
    f.seek(piece.start)
    remaining = piece.size
    while remaining > 0 and (line := f.readline()):
        remaining -= len(line)
        yield line


def _jsonl_documents(piece: Piece, text_field: str, notes: ReadNotes, skip_bad_lines: bool) -> Iterator[str]:
    source = piece.source
    with fsspec.open(source.url, "rb") as raw:
        f = gzip.open(raw, "rb") if source.kind == "jsonl.gz" else raw
        lines = f if piece.whole else _lines(f, piece)
        yielded = False
        for number, line in enumerate(lines, start=piece.first_line):
            if not line.strip():
                continue
            try:
                text = _jsonl_text(line, text_field, source, notes)
            except BadLineError as error:
                problem = f"{source.name}, line {number}: {error}"
                if not skip_bad_lines:
                    raise BadLineError(problem) from None
                notes.counts["skipped_lines"] += 1
                notes.skipped_lines.append(problem)
                continue
            if text:
                yielded = True
                yield text
            else:
                notes.counts["empty_documents"] += 1
        if not yielded and piece.whole:
            notes.counts["empty_files"] += 1


def _jsonl_text(line: bytes, text_field: str, source: Source, notes: ReadNotes) -> str:
    """The text of one JSONL line, or a `BadLineError` saying what is wrong with it (no place yet)."""
    try:
        record = json.loads(_decode(line, source, notes))
    except json.JSONDecodeError as e:
        raise BadLineError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict) or text_field not in record:
        raise BadLineError(f"no {text_field!r} field (pass --text-field to name another)")
    text = record[text_field]
    if not isinstance(text, str):
        raise BadLineError(f"field {text_field!r} is {type(text).__name__}, not a string")
    return _without_surrogates(text, source, notes)


def _parquet_documents(source: Source, text_field: str, notes: ReadNotes) -> Iterator[str]:
    import pyarrow.parquet as pq

    with fsspec.open(source.url, "rb") as f:
        try:
            table = pq.ParquetFile(f)
        except Exception as e:
            raise InputError(f"{source.name}: not a readable Parquet file ({e})") from None
        if text_field not in table.schema_arrow.names:
            names = ", ".join(table.schema_arrow.names)
            raise InputError(f"{source.name}: no column {text_field!r} (columns: {names}); pass --text-field")
        yielded = False
        for batch in table.iter_batches(columns=[text_field]):
            for value in batch.column(0).to_pylist():
                text = _decode(value, source, notes) if isinstance(value, bytes) else value
                if text and isinstance(text, str):
                    yielded = True
                    yield text
                elif text:
                    raise InputError(
                        f"{source.name}: column {text_field!r} holds {type(text).__name__}, not text"
                    )
                else:
                    notes.counts["empty_documents"] += 1
        if not yielded:
            notes.counts["empty_files"] += 1
