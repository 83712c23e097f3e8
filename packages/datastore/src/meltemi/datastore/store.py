"""Read a token store: documents, token ranges and document boundaries, every chunk read checked.

A read of many token ranges (a batch of sequences) reads each needed chunk once, adjacent chunks as one
range, and issues the token reads and the reads of the document boundaries they need together.
"""

import json
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from meltemi.datastore.build.records import PartSummary
from meltemi.datastore.build.request import BuildRequest
from meltemi.datastore.errors import (
    DatastoreError,
    IncompleteStoreError,
    IntegrityError,
    NoSuchStoreError,
    Remedy,
    TokenizerMismatchError,
)
from meltemi.datastore.files import StoreFiles, open_files
from meltemi.datastore.layout import (
    BUILD_DIR,
    CHAT,
    LOSS_WEIGHTS,
    MANIFEST,
    OFFSETS,
    OFFSETS_INDEX,
    READABLE_FORMATS,
    STOPPED,
    TEXT,
    TOKENS,
    ShardLayout,
    offsets_index_layout,
    store_arrays,
)
from meltemi.datastore.shards import ShardedArray
from meltemi.datastore.storage import Directory, Location, check_readable, read_object
from meltemi.datastore.tokenizer_file import tokenizer_digest

_HEX_HASH = re.compile(r"[0-9a-f]{64}")


class Slicer:
    """`store.tokens[a:b]`, `store.offsets[i]`: an array's elements by index or slice (step 1)."""

    def __init__(self, array: ShardedArray):
        self._array = array

    def __len__(self) -> int:
        return self._array.size

    def __getitem__(self, key: int | slice) -> np.ndarray | int:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._array.size)
            if step != 1:
                raise ValueError(f"slices of {self._array.name!r} must have step 1")
            return self._array.read(start, max(start, stop))
        index = checked_index(key, self._array.size, f"{self._array.name}[]", "elements")
        return int(self._array.read(index, index + 1)[0])


def checked_index(key: object, size: int, where: str, what: str) -> int:
    """``key`` as an index into ``size`` things (negative from the end), or an error naming both.

    >>> checked_index(-1, 6, "doc", "documents")
    5
    >>> checked_index(99, 6, "doc", "documents")
    Traceback (most recent call last):
    ...
    IndexError: doc: index 99 is out of range: the store has 6 documents (valid: 0..5, or -6..-1)
    """
    if isinstance(key, bool) or not isinstance(key, int | np.integer):
        raise TypeError(f"{where}: the index must be an int, got {type(key).__name__} {key!r}")
    if not -size <= key < size:
        raise IndexError(
            f"{where}: index {key} is out of range: the store has {size:,} {what}"
            + (f" (valid: 0..{size - 1}, or -{size}..-1)" if size else "")
        )
    return int(key) % size


@dataclass(frozen=True)
class Spans:
    """Token spans read whole, one after another: `tokens` and (from a chat store) `weights`, joined."""

    tokens: np.ndarray
    weights: np.ndarray | None


@dataclass(frozen=True)
class Windows:
    """Token windows and the documents that start inside them.

    `tokens` is `(rows, length)`. Document `d` starting at token position `p` with `start < p < start +
    length` gives an entry `boundary_rows = row`, `boundary_positions = p - start`, in order.
    """

    tokens: np.ndarray
    boundary_rows: np.ndarray
    boundary_positions: np.ndarray


class TokenStore:
    """A built token store, opened for reading. Checksums are verified for every chunk read by default.

    `path` is a local directory, or a URL of the storage seam (`gs://...`, `s3://...`, `file:///...`,
    `memory://...`), probed first so that a missing bucket, refused credentials or an unreachable endpoint
    fail at once in one line. Opening reads a fixed number of objects, whatever the store's size: the
    manifest, each array's `zarr.json` and `offsets_index` (8 bytes per 1,024 documents, one object in
    format 3; 23 MB for 3 billion documents, held in memory once); tokens and offsets are read as needed.
    Stores of every format in `READABLE_FORMATS` open.
    `arrays` holds the three arrays for chunk-level reads; `audit_store` checks a whole store.

    >>> import tempfile
    >>> from meltemi.datastore import build_store, corpora
    >>> tmp = tempfile.mkdtemp()
    >>> files = corpora.python_stdlib()[:10]
    >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
    >>> _ = build_store(files, tok, f"{tmp}/store", progress=False)
    >>> store = TokenStore.open(f"{tmp}/store", tokenizer=tok)
    >>> store.num_docs == len(files) - store.manifest["counts"].get("empty_files", 0)
    True
    >>> store.offsets[-1] == store.num_tokens
    True
    >>> bool((store.doc(3) == store.tokens[store.offsets[3] : store.offsets[4]]).all())
    True
    """

    def __init__(self, path: str, files: StoreFiles, manifest: dict[str, Any], verify: bool):
        self.path, self.manifest, self.verify = path, manifest, verify
        counts = manifest["counts"]
        self.num_tokens, self.num_docs = int(counts["tokens"]), int(counts["documents"])
        self.arrays = {name: _open_array(files, name, manifest, verify) for name in store_arrays(manifest)}
        self._tokens, self._offsets = self.arrays[TOKENS], self.arrays[OFFSETS]
        self._weights = self.arrays.get(LOSS_WEIGHTS)
        self._index = self.arrays[OFFSETS_INDEX].read_all().view("<i8")  # offsets are < 2**63
        self.tokens, self.offsets = Slicer(self._tokens), Slicer(self._offsets)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike,
        tokenizer: str | os.PathLike | None = None,
        verify: bool = True,
        files: StoreFiles | None = None,
    ):
        """Open the store at `path`; with `tokenizer` (a `tokenizer.json` or its hash), check it matches.
        `files`, when given, reads the store's objects instead of `path`'s own reader (one that wraps it:
        counting reads, caching)."""
        location = os.fspath(path)
        place = Location.parse(location)
        if not place.is_local:
            check_readable(place)
        files = open_files(location) if files is None else files
        local = place.local_path
        text = files.read(MANIFEST) if local is None or local.is_dir() else None
        if text is None:
            raise _why_not_a_store(location, Directory(place))
        try:
            manifest = json.loads(text)
        except ValueError as e:
            raise DatastoreError(
                f"{files.where(MANIFEST)}: not readable JSON ({e}); the manifest is damaged"
            ) from None
        if not isinstance(manifest, dict):
            raise DatastoreError(f"{files.where(MANIFEST)}: not a JSON object; the manifest is damaged")
        if manifest.get("format_version") not in READABLE_FORMATS:
            readable = " and ".join(map(str, READABLE_FORMATS))
            raise DatastoreError(
                f"{location}: token store format {manifest.get('format_version')}, "
                f"this library reads formats {readable}; rebuild the store with this version"
            )
        _check_manifest(files, manifest)
        store = cls(location, files, manifest, verify)
        if tokenizer is not None:
            store.check_tokenizer(tokenizer)
        return store

    @property
    def format(self) -> str:
        """``text`` (documents, each followed by the tokenizer's end-of-document token) or ``chat``
        (conversations rendered by a chat template, each token with a loss weight)."""
        return self.manifest.get("format", TEXT)

    @property
    def is_chat(self) -> bool:
        return self.format == CHAT

    @property
    def tokenizer_hash(self) -> str:
        """SHA-256 of the canonical JSON of the tokenizer the store was built with."""
        return self.manifest["tokenizer"]["sha256"]

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def content_hash(self) -> str:
        """SHA-256 of the token and offset values: equal hashes, equal stores (whatever the layout)."""
        return self.manifest["content_sha256"]

    def check_tokenizer(self, tokenizer: str | os.PathLike) -> None:
        """Raise `TokenizerMismatchError` unless `tokenizer` (a SHA-256 hash, or a tokenizer.json's path or
        URL, read through the storage seam like the store) is the store's tokenizer."""
        text = os.fspath(tokenizer)
        if _HEX_HASH.fullmatch(text):
            expected, given = text, f"the tokenizer with sha256 {text}"
        else:
            data = read_object(text)
            if data is None:
                raise DatastoreError(
                    f"expected tokenizer {text!r} is neither a tokenizer.json file nor a SHA-256 hash"
                )
            expected = tokenizer_digest(data.decode("utf-8", errors="replace"), text)
            given = f"{text} (sha256 {expected})"
        if expected != self.tokenizer_hash:
            built = self.manifest["tokenizer"]["name"]
            raise TokenizerMismatchError(
                f"{self.path} was built with tokenizer {built} (sha256 {self.tokenizer_hash}), "
                f"not with {given}; open it with the tokenizer it was built with, or rebuild it"
            )

    def doc(self, i: int) -> np.ndarray:
        """The tokens of document `i` (its EOS included when the store was built with one)."""
        i = checked_index(i, self.num_docs, "doc", "documents")
        start, stop = self._offsets.read(i, i + 2).tolist()
        return self._tokens.read(start, stop)

    def doc_weights(self, i: int) -> np.ndarray:
        """The loss weights of conversation `i`'s tokens (a chat store's; an error for a text store)."""
        if self._weights is None:
            raise ValueError(f"{self.path} is a {self.format} store: its tokens have no loss weights")
        i = checked_index(i, self.num_docs, "doc_weights", "documents")
        start, stop = self._offsets.read(i, i + 2).tolist()
        return self._weights.read(start, stop)

    def read_spans(self, starts: np.ndarray, lengths: np.ndarray) -> Spans:
        """Tokens `[s, s + n)` for each `s, n` of `starts, lengths`, joined in that order (with a chat
        store's loss weights), every chunk needed read once and both arrays' reads issued together.

        >>> import tempfile
        >>> from meltemi.datastore import build_store, corpora
        >>> tmp = tempfile.mkdtemp()
        >>> files = corpora.python_stdlib()[:4]
        >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
        >>> store = TokenStore.open(build_store(files, tok, f"{tmp}/store", progress=False).out)
        >>> spans = store.read_spans(np.array([5, 0]), np.array([2, 3]))
        >>> spans.tokens.tolist() == store.tokens[5:7].tolist() + store.tokens[0:3].tolist()
        True
        """
        starts = np.asarray(starts, np.int64).reshape(-1)
        lengths = np.asarray(lengths, np.int64).reshape(-1)
        if starts.shape != lengths.shape:
            raise ValueError(f"{len(starts)} span starts but {len(lengths)} lengths")
        if lengths.size and (
            lengths.min() < 0 or starts.min() < 0 or (starts + lengths).max() > self.num_tokens
        ):
            raise IndexError(f"token spans run outside the store's {self.num_tokens} tokens")
        chunk = self._tokens.layout.chunk
        used = lengths > 0
        first, last = starts[used] // chunk, (starts[used] + lengths[used] - 1) // chunk
        needed = np.unique(np.repeat(first, last - first + 1) + ragged_arange(last - first + 1))
        pending = [array.start_chunks(needed) for array in (self._tokens, self._weights) if array is not None]
        positions = np.repeat(starts, lengths) + ragged_arange(lengths)
        at = np.searchsorted(needed, positions // chunk) * chunk + positions % chunk
        values = [read()[at] for read in pending]
        return Spans(values[0], values[1] if len(values) > 1 else None)

    def read_ranges(self, starts: np.ndarray, length: int) -> np.ndarray:
        """Tokens `[s, s + length)` for each `s` in `starts`, as a `(len(starts), length)` array."""
        return self._read(starts, length, boundaries=False).tokens

    def read_windows(self, starts: np.ndarray, length: int) -> Windows:
        """`read_ranges`, and where documents start inside each window, read together.

        >>> import tempfile
        >>> from meltemi.datastore import build_store, corpora
        >>> tmp = tempfile.mkdtemp()
        >>> files = corpora.python_stdlib()[:4]
        >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
        >>> store = TokenStore.open(build_store(files, tok, f"{tmp}/store", progress=False).out)
        >>> second = int(store.offsets[1])
        >>> windows = store.read_windows(np.array([second - 2]), 5)
        >>> windows.tokens.shape, windows.boundary_rows.tolist(), windows.boundary_positions.tolist()
        ((1, 5), [0], [2])
        """
        return self._read(starts, length, boundaries=True)

    def _read(self, starts: np.ndarray, length: int, boundaries: bool) -> Windows:
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        if length < 1:
            raise ValueError(f"token ranges must be at least 1 token long, got {length}")
        if starts.size and (starts.min() < 0 or starts.max() + length > self.num_tokens):
            raise IndexError(
                f"token ranges of length {length} from {starts.min()}..{starts.max()} "
                f"run past the store's {self.num_tokens} tokens"
            )
        if starts.size == 0:
            none = np.zeros(0, np.int64)
            return Windows(np.zeros((0, length), self._tokens.dtype), none, none)
        chunk = self._tokens.layout.chunk
        first, last = starts // chunk, (starts + length - 1) // chunk
        spans = last - first + 1
        needed = np.unique(np.repeat(first, spans) + ragged_arange(spans))
        tokens = self._tokens.start_chunks(needed)
        if boundaries:
            span_first = np.searchsorted(self._index, starts, side="right") - 1
            span_last = np.searchsorted(self._index, starts + length - 1, side="right") - 1
            counts = span_last - span_first + 1
            offset_chunks = np.unique(np.repeat(span_first, counts) + ragged_arange(counts))
            offsets = self._offsets.start_chunks(offset_chunks)
        at = np.searchsorted(needed, first) * chunk + starts - first * chunk
        out = np.lib.stride_tricks.sliding_window_view(tokens(), length)[at]
        if not boundaries:
            return Windows(out, np.zeros(0, np.int64), np.zeros(0, np.int64))
        known, per_chunk = offsets().astype(np.int64), self._offsets.layout.chunk
        padding = offset_chunks[-1] * per_chunk + np.arange(per_chunk) >= self._offsets.size
        known[len(known) - per_chunk :][padding] = np.iinfo(np.int64).max  # sorts after every boundary
        lo = np.searchsorted(known, starts, side="right")
        hi = np.searchsorted(known, starts + length, side="left")
        inside = hi - lo
        rows = np.repeat(np.arange(len(starts)), inside)
        positions = known[np.repeat(lo, inside) + ragged_arange(inside)] - starts[rows]
        return Windows(out, rows, positions)


def ragged_arange(lengths: np.ndarray) -> np.ndarray:
    """`concatenate([arange(n) for n in lengths])`, vectorised."""
    ends = np.cumsum(lengths)
    if ends.size == 0:
        return np.zeros(0, np.int64)
    return np.arange(ends[-1]) - np.repeat(ends - lengths, lengths)


_MANIFEST_FIELDS = {
    ("counts", "tokens"): int,
    ("counts", "documents"): int,
    ("tokenizer", "sha256"): str,
    ("tokenizer", "name"): str,
    ("tokenizer", "vocab_size"): int,
}
_ARRAY_FIELDS = [("dtype", str), ("size", int), ("chunk", int), ("shard", int)]


def _check_manifest(files: StoreFiles, manifest: dict) -> None:
    arrays = {(name, key): kind for name in store_arrays(manifest) for key, kind in _ARRAY_FIELDS}
    for (section, key), kind in (_MANIFEST_FIELDS | arrays).items():
        value = manifest.get(section, {}).get(key) if isinstance(manifest.get(section), dict) else None
        if not isinstance(value, kind):
            raise DatastoreError(
                f"{files.where(MANIFEST)}: {section}.{key} is missing or not {kind.__name__}; "
                "the manifest is damaged"
            )
    expected_sizes = {TOKENS: manifest["counts"]["tokens"], OFFSETS: manifest["counts"]["documents"] + 1}
    if manifest.get("format", TEXT) not in (TEXT, CHAT):
        raise DatastoreError(
            f"{files.where(MANIFEST)}: format {manifest['format']!r} is neither {TEXT!r} nor {CHAT!r}; "
            "the manifest is damaged, or written by a newer version of this library"
        )
    if manifest.get("format") == CHAT:
        expected_sizes[LOSS_WEIGHTS] = manifest["counts"]["tokens"]
    for name, size in expected_sizes.items():
        if manifest[name]["size"] != size:
            raise DatastoreError(
                f"{files.where(MANIFEST)}: {name}.size is {manifest[name]['size']} but the counts imply "
                f"{size}; the manifest is damaged"
            )
    if manifest["format_version"] >= 3:
        index = offsets_index_layout(manifest["counts"]["documents"]).describe()
        found = {key: manifest[OFFSETS_INDEX][key] for key in index}
        if found != index:
            raise DatastoreError(
                f"{files.where(MANIFEST)}: {OFFSETS_INDEX} is laid out as {found}, but format "
                f"{manifest['format_version']} lays it out in one shard, as {index}; the manifest is damaged"
            )


def _open_array(files: StoreFiles, name: str, manifest: dict, verify: bool) -> ShardedArray:
    key = f"{name}/zarr.json"
    try:
        layout = ShardLayout.from_manifest(manifest[name])
    except (TypeError, ValueError) as e:
        raise DatastoreError(f"{files.where(MANIFEST)}: the layout of {name!r} is invalid ({e})") from None
    text = files.read(key)
    if text is None:
        raise IntegrityError(f"{files.where(key)}: the metadata of {name!r} is missing; rebuild the store")
    try:
        metadata = json.loads(text)
    except ValueError as e:
        raise IntegrityError(f"{files.where(key)}: the metadata of {name!r} is not JSON ({e})") from None
    difference = layout.mismatch(metadata)
    if difference:
        raise IntegrityError(
            f"{files.where(key)}: {name!r} is not the array the manifest describes: {difference}"
        )
    return ShardedArray(files, name, layout, verify)


def _why_not_a_store(location: str, directory: Directory) -> DatastoreError:
    local = directory.location.local_path
    if local is not None and local.exists() and not local.is_dir():
        return DatastoreError(
            f"{location} is a file, not a token store (a token store is a directory with {MANIFEST})"
        )
    plan = directory.read_json(f"{BUILD_DIR}/plan.json")
    if plan is not None:
        units = len(plan["units"])
        done = [key for key in directory.list(f"{BUILD_DIR}/parts/") if key.endswith(".json")]
        tokens = sum(PartSummary.from_json(directory.read_json(key)).tokens for key in done)
        stage = "was assembling the arrays" if len(done) == units else "was tokenizing"
        progress = f"{stage} and stopped after {len(done)} of {units} units ({tokens:,} tokens)"
        stopped = directory.read_json(f"{BUILD_DIR}/{STOPPED}")
        if stopped is not None and "cause" in stopped:  # the remedies as data, as a build records them now
            request = stopped["request"]
            return IncompleteStoreError(
                f"{location} is an incomplete token store: its build {progress}, at a bad input: "
                f"{stopped['cause']}",
                remedies=[Remedy.from_json(remedy) for remedy in stopped["remedies"]],
                request=BuildRequest(**request | {"inputs": tuple(request["inputs"])}),
            )
        if stopped is not None:  # recorded in words by an earlier version
            return IncompleteStoreError(
                f"{location} is an incomplete token store: its build {progress}, at a bad input: "
                f"{stopped['error']}. {stopped['how']}"
            )
        return IncompleteStoreError(
            f"{location} is an incomplete token store: its build {progress}. "
            f"Finish it by running the build again: {plan['command']}"
        )
    if directory.list(f"{BUILD_DIR}/"):
        return IncompleteStoreError(
            f"{location} is an incomplete token store: its build stopped before planning; run the build again"
        )
    if local is not None and not local.exists():
        return NoSuchStoreError(f"{location}: no such token store (the directory does not exist)")
    return DatastoreError(
        f"{location} is not a token store (it has no {MANIFEST}){Location.parse(location).found_empty_note}"
    )
