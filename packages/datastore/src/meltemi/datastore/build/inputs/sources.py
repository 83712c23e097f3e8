"""Input sources: resolve paths, globs and fsspec URLs to files in a stable order, and read documents.

Formats, by file name: `.jsonl` (one JSON object per line, text in a field), `.json` (such lines, or one array
of such objects, as Hugging Face datasets reads either), `.parquet` and `.arrow` (text in a column), anything
else plain text (one document per file); any of them compressed whole (`.jsonl.zst`, `.json.gz`, `.txt.xz`:
`compression`) is read as it streams out. A document is a whole text file, one JSON record or one table
row; one that is not UTF-8 text (a binary file, say) is an error naming the file and byte unless the reading
policy says to skip or repair it. Documents come in sorted source order, then in order within a source, so a
build never depends on how the files were listed.
"""

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

import fsspec

from meltemi.datastore.build.inputs.dataset_card import (
    CARD,
    card_metadata,
    card_subsets,
    chosen_subset,
    describes_data,
)
from meltemi.datastore.build.inputs.dataset_files import TrainingFiles, common_directory, training_files
from meltemi.datastore.build.inputs.files import (
    Piece,
    Source,
    _in_bucket,
    open_input,
    open_source,
    redact,
)
from meltemi.datastore.build.inputs.json_array import array_items, text_chunks
from meltemi.datastore.build.inputs.tables import open_table
from meltemi.datastore.errors import BadLineError, InputError, InvalidUtf8Error, Remedy, Way
from meltemi.datastore.hub_cache import local_or_cached, not_cached
from meltemi.datastore.storage import Location

InvalidUtf8 = Literal["error", "skip", "replace"]
"""What a build does with a document that is not UTF-8: stop naming it, leave it out, or replace its
undecodable bytes (and escaped lone surrogates) with U+FFFD."""
INVALID_UTF8: tuple[str, ...] = get_args(InvalidUtf8)
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_T = TypeVar("_T")

TABLE_KINDS = ("parquet", "arrow")  # the `Source.kind`s read as tables of columns (`tables.open_table`)
_GLOB_CHARS = "*?["
ANOTHER_FIELD = Remedy(
    " (pass {} to name another)", (Way({"text_field": "FIELD"}),)
)  # a record without the field


def _url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    return path if fs.protocol in ("file", ("file", "local")) else fs.unstrip_protocol(path)


def resolve_inputs(inputs: Sequence[str]) -> list[str]:
    """Every file named by `inputs` (files, directories, globs, URLs), sorted, without duplicates.

    >>> resolve_inputs([__file__]) == [__file__]
    True
    """
    return sorted({f for _, files, _ in _resolved(inputs) for f in files})


def resolve_data_inputs(
    inputs: Sequence[str],
    split: str | None = None,
    subset: str | None = None,
    *,
    chat: bool = True,
) -> TrainingFiles:
    """The files `inputs` name, as `resolve_inputs`, but a data set's directory (or bucket prefix) gives only
    its data files of the train split (or of `split`), found as Hugging Face datasets finds a data set's
    files: by the `configs` of its card (`dataset_card`: `subset`, else its default) when they say, else by
    their names (`dataset_files.training_files`); a file named itself is kept whatever its name. For `chat`
    every directory is a data set's; for text only one whose card describes data or that `save_to_disk`
    wrote (any other is a corpus of files, read whole).

    >>> resolve_data_inputs([__file__]).files == [__file__]
    True
    """
    found: set[str] = set()
    other_splits: Counter[str] = Counter()
    read: list[str] = []
    subsets: list[str] = []
    for item, files, listed in _resolved(inputs):
        root, metadata = _card(redact(item), files, strict=chat) if listed else ("", None)
        if listed and (chat or describes_data(metadata) or _saved_to_disk(files)):
            chosen_one = chosen_subset(card_subsets(metadata, redact(item)), subset, redact(item))
            chosen = training_files(redact(item), files, split, chosen_one, root)
            files = chosen.files
            other_splits.update(chosen.other_splits)
            read += [chosen.split] if chosen.split and chosen.split not in read else []
            subsets += [chosen.subset] if chosen.subset and chosen.subset not in subsets else []
        found.update(files)
    if subset is not None and not subsets:
        given = ", ".join(redact(str(i)) for i in inputs)
        raise InputError(f"{given}: not a data set's directory, so there is no subset {subset!r} to read")
    return TrainingFiles(
        sorted(found), dict(sorted(other_splits.items())), ", ".join(read) or None, ", ".join(subsets) or None
    )


def _card(item: str, files: Sequence[str], strict: bool) -> tuple[str, dict[str, Any] | None]:
    """The data set's directory (with its `/`) and its card's YAML header, when the listing `files` has a
    card (`README.md`) at its top; else `("", None)`. A header that is not YAML is an `InputError` when
    `strict`, else no header (a corpus of files may hold any README)."""
    root = common_directory(files)
    if root + CARD not in files:
        return "", None
    with open_input(root + CARD) as f:
        text = f.read().decode("utf-8", errors="replace")
    try:
        return root, card_metadata(text, item)
    except InputError:
        if strict:
            raise
        return root, None


def _saved_to_disk(files: Sequence[str]) -> bool:
    """Whether a listing is what Hugging Face datasets' `save_to_disk` writes: at its top, a data set's
    `state.json` and `dataset_info.json`, or a dictionary of them's `dataset_dict.json`."""
    root = common_directory(files)
    top = {f[len(root) :] for f in files if "/" not in f[len(root) :]}
    return "dataset_dict.json" in top or {"state.json", "dataset_info.json"} <= top


def _resolved(inputs: Sequence[str]) -> Iterator[tuple[str, list[str], bool]]:
    """Each input, the files it names, and whether they were listed (a directory's, a prefix's)."""
    if not inputs:
        raise InputError("no inputs given: pass at least one file, directory, glob or URL")
    for item in inputs:
        try:
            files, listed = _resolve(local_or_cached(str(item), "dataset"))
        except (ImportError, ValueError, OSError) as e:
            raise InputError(f"input {redact(str(item))!r}: cannot be listed ({redact(str(e))})") from None
        yield str(item), files, listed


def _resolve(item: str) -> tuple[list[str], bool]:
    """The files `item` names, and whether they were listed (a directory's, a prefix's) rather than named
    (a file, an object, a pattern's matches)."""
    if _in_bucket(item):
        return _resolve_in_bucket(item)
    fs, path = fsspec.core.url_to_fs(item)
    listed = False
    if any(c in path for c in _GLOB_CHARS):
        matches = [p for p in fs.glob(path) if fs.isfile(p)]
        if not matches:
            raise InputError(f"input {redact(item)!r}: the pattern matches no file")
    elif fs.isdir(path):
        matches, listed = [p for p in fs.find(path) if not _hidden(p[len(path) :])], True
        if not matches:
            raise InputError(f"input {redact(item)!r}: the directory holds no file")
    elif fs.isfile(path):
        matches = [path]
    else:
        raise InputError(f"input {redact(item)!r}: no such file or directory{not_cached(item, 'dataset')}")
    return [_url(fs, p) for p in matches], listed


def _resolve_in_bucket(item: str) -> tuple[list[str], bool]:
    """The object a bucket URL names, or the objects under it as a prefix (a bucket has no globs), and
    whether they were listed."""
    from meltemi.datastore.storage.inputs import list_objects

    if any(c in Location.parse(item).path for c in _GLOB_CHARS):
        raise InputError(
            f"input {redact(item)!r}: a bucket URL cannot be a pattern; name an object or a prefix"
        )
    matches = list_objects(item)
    if not matches:
        note = Location.parse(item).found_empty_note
        raise InputError(f"input {redact(item)!r}: no such object, and no object under it{note}")
    return matches, matches != [str(Location.parse(item))]


def _hidden(relative: str) -> bool:
    return any(part.startswith(".") for part in relative.split("/") if part)


@dataclass(frozen=True)
class ReadPolicy:
    """How a build reads documents: the JSONL field or Parquet column of the text, whether bad JSONL lines
    are skipped, and what becomes of documents that are not UTF-8.

    >>> ReadPolicy(invalid_utf8="skip").text_field, ReadPolicy().invalid_utf8
    ('text', 'error')
    """

    text_field: str = "text"
    skip_bad_lines: bool = False
    invalid_utf8: InvalidUtf8 = "error"

    def __post_init__(self) -> None:
        if self.invalid_utf8 not in INVALID_UTF8:
            choices = ", ".join(repr(c) for c in INVALID_UTF8)
            raise ValueError(f"invalid_utf8 must be one of {choices}, got {self.invalid_utf8!r}")


@dataclass
class ReadNotes:
    """What reading documents skipped or repaired: counts by kind, and where, so a user can fix the inputs.

    `counts` holds `empty_files`, `empty_documents`, `invalid_utf8_documents` (documents that are not UTF-8,
    skipped or repaired as the policy says) and `skipped_lines`; `invalid_utf8_files` names each file with
    such a document, `skipped_lines` each line skipped (`"<file>, line <n>: <why>"`, only with
    `skip_bad_lines`).
    """

    counts: Counter = field(default_factory=Counter)
    invalid_utf8_files: set[str] = field(default_factory=set)
    skipped_lines: list[str] = field(default_factory=list)

    def not_text(self, source: Source) -> None:
        self.counts["invalid_utf8_documents"] += 1
        self.invalid_utf8_files.add(source.name)


@dataclass(frozen=True)
class Place:
    """Where a document is, for messages: its line (JSONL), row (Parquet) or item (a JSON array), and the
    byte offset it starts at in its file (in the uncompressed text of a compressed file; in its own bytes for
    a Parquet row)."""

    source: Source
    line: int | None = None
    row: int | None = None
    start: int = 0
    item: int | None = None

    def __str__(self) -> str:
        if self.line is not None:
            return f"{self.source.name}, line {self.line}"
        if self.row is not None:
            return f"{self.source.name}, row {self.row}"
        if self.item is not None:
            return f"{self.source.name}, item {self.item}"
        return self.source.name

    def byte(self, offset: int) -> str:
        if self.row is not None:
            return f"byte {offset} of the row"
        if self.source.compression is not None:
            return f"byte {offset} of the uncompressed text"
        return f"byte {offset}"

    def error(self, message: str, offset: int) -> InvalidUtf8Error:
        where = {"line": self.line, "row": self.row}
        return InvalidUtf8Error(message, file=self.source.name, offset=offset, **where)


def decode_document(data: bytes, place: Place, policy: ReadPolicy, notes: ReadNotes) -> str | None:
    """`data` as text; when it is not UTF-8: an error, None (skip it) or the text repaired, per `policy`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if policy.invalid_utf8 == "error":
            offset = place.start + e.start
            bad = f"0x{data[e.start]:02x}: {e.reason}"
            raise place.error(f"{place}: not UTF-8 text at {place.byte(offset)} ({bad})", offset) from None
        notes.not_text(place.source)
        return None if policy.invalid_utf8 == "skip" else data.decode("utf-8", errors="replace")


def without_surrogates(text: str, place: Place, policy: ReadPolicy, notes: ReadNotes) -> str | None:
    """JSON may escape lone surrogates (`"\\ud800"`), which are not text: handled as invalid UTF-8 is."""
    found = LONE_SURROGATE.search(text)
    if found is None:
        return text
    if policy.invalid_utf8 == "error":
        escape = f"\\u{ord(found.group()):04x}"
        message = (
            f"{place} ({place.byte(place.start)}): its text holds an escaped lone surrogate ({escape}), "
        )
        raise place.error(message + "which is not UTF-8 text", place.start)
    notes.not_text(place.source)
    return None if policy.invalid_utf8 == "skip" else LONE_SURROGATE.sub("\ufffd", text)


def read_documents(piece: Piece, policy: ReadPolicy, notes: ReadNotes) -> Iterator[str]:
    """The non-empty documents of a piece of a source, in file order; skipped and repaired ones noted.

    A JSONL line that is not a JSON object with a string text field is a `BadLineError` naming the file
    and line, or, with `policy.skip_bad_lines`, skipped and noted. A document that is not UTF-8 is an
    `InvalidUtf8Error` naming the file and byte, or skipped or repaired and noted (`policy.invalid_utf8`).

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> _ = path.write_bytes(b'{"text": "one"}\\nnot json\\n{"text": "two\\xff"}\\n{"text": "four"}\\n')
    >>> from meltemi.datastore.build.inputs.files import describe_source
    >>> notes, piece = ReadNotes(), describe_source(str(path)).pieces()[0]
    >>> list(read_documents(piece, ReadPolicy(skip_bad_lines=True, invalid_utf8="skip"), notes))
    ['one', 'four']
    >>> notes.counts["skipped_lines"], notes.skipped_lines[0].split(", ")[-1]
    (1, 'line 2: not valid JSON (Expecting value at column 1)')
    >>> notes.counts["invalid_utf8_documents"]
    1
    >>> list(read_documents(piece, ReadPolicy(skip_bad_lines=True), notes))
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.InvalidUtf8Error: ...a.jsonl, line 3: not UTF-8 text at byte 38 (0xff: ...)
    """
    kind = piece.source.kind
    if kind == "text":
        yield from _text_documents(piece.source, policy, notes)
    elif kind in TABLE_KINDS:
        yield from _table_documents(piece.source, policy, notes)
    else:
        yield from _jsonl_documents(piece, policy, notes)


def _text_documents(source: Source, policy: ReadPolicy, notes: ReadNotes) -> Iterator[str]:
    with open_source(source) as f:
        data = f.read()
    if not data.strip():
        notes.counts["empty_files"] += 1
        return
    text = decode_document(data, Place(source), policy, notes)
    if text is not None:
        yield text


def _lines(f, piece: Piece) -> Iterator[bytes]:
    """The lines of `piece` from the open file `f` (a piece always starts and ends at a line boundary)."""
    f.seek(piece.start)
    remaining = piece.size
    while remaining > 0 and (line := f.readline()):
        remaining -= len(line)
        yield line


def _jsonl_documents(piece: Piece, policy: ReadPolicy, notes: ReadNotes) -> Iterator[str]:
    yielded = False
    if piece.source.kind == "json" and holds_json_array(piece.source):
        texts = read_json_array(
            piece, policy, notes, lambda record, place: _record_text(record, place, policy, notes)
        )
    else:
        texts = read_jsonl(piece, policy, notes, lambda line, place: _jsonl_text(line, place, policy, notes))
    for text in texts:
        if text:
            yielded = True
            yield text
        else:
            notes.counts["empty_documents"] += 1
    if not yielded and piece.whole:
        notes.counts["empty_files"] += 1


def read_jsonl(
    piece: Piece,
    policy: ReadPolicy,
    notes: ReadNotes,
    parse: Callable[[str, Place], _T | None],
    refused: str = "skipped_lines",
) -> Iterator[_T]:
    """What `parse(line, place)` makes of each non-blank line of a JSONL piece, in order; None is nothing.

    A line that is not UTF-8 is an error, skipped or repaired as `policy.invalid_utf8` says before it is
    parsed. A `BadLineError` from `parse` (saying what is wrong, without the place) stops the read naming
    the file and line, or with `policy.skip_bad_lines` skips the line, counted under `refused` in
    `notes.counts` and named in `notes.skipped_lines`.
    """
    source = piece.source
    with open_source(source) as f:
        lines = f if piece.whole else _lines(f, piece)
        start = piece.start
        for number, line in enumerate(lines, start=piece.first_line):
            place, start = Place(source, line=number, start=start), start + len(line)
            if not line.strip():
                continue
            decoded = decode_document(line, place, policy, notes)
            if (
                decoded is not None
                and (item := parsed_or_refused(parse, decoded, place, policy, notes, refused)) is not None
            ):
                yield item


def holds_json_array(source: Source) -> bool:
    """Whether a `.json` file holds one JSON array (of records), not JSON Lines: its first character that
    is not white space is `[` (Hugging Face datasets reads a `.json` file either way)."""
    with open_source(source) as f:
        while block := f.read(4096):
            if stripped := block.lstrip():
                return stripped.startswith(b"[")
    return False


def read_json_array(
    piece: Piece,
    policy: ReadPolicy,
    notes: ReadNotes,
    parse: Callable[[Any, Place], _T | None],
    refused: str = "skipped_lines",
) -> Iterator[_T]:
    """What `parse(record, place)` makes of each record of a `.json` file holding one array, in order; None
    is nothing. The array is read as a stream (`json_array`: one record in memory at a time, not the whole
    file). A bad record (a `BadLineError` from `parse`) stops the read naming its item (its place in the
    array, from 1), or is skipped as a bad JSONL line is (`read_jsonl`); a file that is not UTF-8 is handled
    as a document is (skipped or repaired whole, so it is checked before its first record when the policy
    is not `error`).

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = path.write_text('[{"text": "one"}, {"text": "two"}]')
    >>> from meltemi.datastore.build.inputs.files import describe_source
    >>> piece = describe_source(str(path)).pieces()[0]
    >>> [(str(place), r["text"]) for place, r in read_json_array(piece, ReadPolicy(), ReadNotes(),
    ...                                                            lambda r, place: (place, r))]
    [('...a.json, item 1', 'one'), ('...a.json, item 2', 'two')]
    """
    source = piece.source
    if policy.invalid_utf8 == "error" or _is_utf8(source):
        try:
            with open_source(source) as f:
                records = array_items(text_chunks(f), source.name)
                yield from _parsed_items(records, piece, policy, notes, parse, refused)
            return
        except UnicodeDecodeError:
            pass  # said below, with the byte, as a document's is
    with open_source(source) as f:
        text = decode_document(f.read(), Place(source), policy, notes)  # an error, or skipped or repaired
    if text is not None:
        yield from _parsed_items(array_items([text], source.name), piece, policy, notes, parse, refused)


def _parsed_items(
    records: Iterator[Any],
    piece: Piece,
    policy: ReadPolicy,
    notes: ReadNotes,
    parse: Callable[[Any, Place], _T | None],
    refused: str,
) -> Iterator[_T]:
    """What `parse` makes of each of a JSON array's `records`, each placed by its item number."""
    for number, record in enumerate(records, start=1):
        item = parsed_or_refused(parse, record, Place(piece.source, item=number), policy, notes, refused)
        if item is not None:
            yield item


def _is_utf8(source: Source) -> bool:
    """Whether all of `source` is UTF-8 text, read as a stream."""
    try:
        with open_source(source) as f:
            for _ in text_chunks(f):
                pass
    except UnicodeDecodeError:
        return False
    return True


def parsed_or_refused(
    parse: Callable[[Any, Place], _T | None],
    value: Any,
    place: Place,
    policy: ReadPolicy,
    notes: ReadNotes,
    refused: str = "skipped_lines",
) -> _T | None:
    """What `parse(value, place)` makes of one record; None when it is nothing, or refused (`refuse`) and
    skipped."""
    try:
        return parse(value, place)
    except BadLineError as error:
        refuse(f"{place}: {error.cause}", policy, notes, refused, error.remedies)
        return None


def refuse(
    problem: str,
    policy: ReadPolicy,
    notes: ReadNotes,
    refused: str = "skipped_lines",
    remedies: tuple[Remedy, ...] = (),
) -> None:
    """Stop at a bad record (`problem` names it and says why; `remedies`, how to read it), or with
    `policy.skip_bad_lines` count it under `refused` in `notes.counts` and name it in `notes.skipped_lines`
    (the caller skips it)."""
    error = BadLineError(problem, remedies=remedies)
    if not policy.skip_bad_lines:
        raise error
    notes.counts[refused] += 1
    notes.skipped_lines.append(str(error))


def _jsonl_text(line: str, place: Place, policy: ReadPolicy, notes: ReadNotes) -> str | None:
    """The text of one JSONL line (None: skipped as not UTF-8), or a `BadLineError` saying what is wrong
    with it (no place yet)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise BadLineError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    return _record_text(record, place, policy, notes)


def _record_text(record: Any, place: Place, policy: ReadPolicy, notes: ReadNotes) -> str | None:
    """The text in one JSON record's text field (None: skipped as not UTF-8), or a `BadLineError` saying
    what is wrong with it."""
    field_name = policy.text_field
    if not isinstance(record, dict) or field_name not in record:
        raise BadLineError(f"no {field_name!r} field", remedies=(ANOTHER_FIELD,))
    text = record[field_name]
    if not isinstance(text, str):
        raise BadLineError(f"field {field_name!r} is {type(text).__name__}, not a string")
    return without_surrogates(text, place, policy, notes)


def _table_documents(source: Source, policy: ReadPolicy, notes: ReadNotes) -> Iterator[str]:
    """Each row's text of a Parquet or Arrow file. Arrow does not check that a string column holds UTF-8, so
    every column of text is read as bytes and decoded here, under the policy, as the other formats are."""
    import pyarrow as pa

    with open_table(source) as table:
        text_field, schema = policy.text_field, table.schema
        if text_field not in schema.names:
            names = ", ".join(schema.names)
            another = Remedy("; pass {}", (Way({"text_field": "FIELD"}),))
            raise InputError(
                f"{source.name}: no column {text_field!r} (columns: {names})", remedies=(another,)
            )
        kind = schema.field(text_field).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        textual = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)
        if not any(test(kind) for test in textual):
            raise InputError(f"{source.name}: column {text_field!r} holds {kind}, not text")
        yielded, row = False, 0
        for batch in table.batches([text_field]):
            column = batch.column(0)
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            for value in column.cast(pa.large_binary()).to_pylist():
                row += 1
                text = decode_document(value, Place(source, row=row), policy, notes) if value else ""
                if text:
                    yielded = True
                    yield text
                elif text is not None:
                    notes.counts["empty_documents"] += 1
        if not yielded:
            notes.counts["empty_files"] += 1
