"""Read a token store: document and token access, with every chunk read checked against its checksum.

Reads are coalesced: a request for many token ranges reads each needed chunk once, in runs of adjacent
chunks, all issued to TensorStore before any is awaited.
"""

import functools
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from meltemi.datastore.errors import (
    DatastoreError,
    IncompleteStoreError,
    IntegrityError,
    TokenizerMismatchError,
)
from meltemi.datastore.layout import (
    BUILD_DIR,
    FORMAT_VERSION,
    MANIFEST,
    OFFSETS,
    TOKENS,
    canonical_tokenizer_hash,
    chunk_file,
    crc32_per_chunk,
    open_array,
    read_json,
)

_HEX_HASH = re.compile(r"[0-9a-f]{64}")


@functools.cache
def _checksum_pool() -> ThreadPoolExecutor:
    """Threads that checksum chunks while others are still being read (zlib releases the GIL)."""
    return ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="meltemi-checksum")


class _ChunkedArray:
    """One of the store's arrays with its chunk size and the manifest's checksum of every chunk."""

    def __init__(self, root: Path, name: str, size: int, chunk: int, checksums: list[str], verify: bool):
        self.root, self.name, self.size, self.chunk = root, name, size, chunk
        self.checksums = np.array([int(c, 16) for c in checksums], np.uint32)
        chunks = -(-size // chunk)
        if len(self.checksums) != chunks:
            raise DatastoreError(
                f"{root / MANIFEST}: lists {len(self.checksums)} checksums for the {chunks} chunks "
                f"of {name!r}; the manifest is damaged"
            )
        self.verify = verify
        try:
            self.array = open_array(root, name)
        except ValueError as e:
            raise IntegrityError(
                f"{root / name / 'zarr.json'}: the array's metadata cannot be read ({e})"
            ) from None

    def read_chunks(self, chunks: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """Read the sorted, distinct `chunks` in runs of adjacent ones, all at once, and check each chunk.

        Returns each run's first chunk and its data (no copy joins them: callers slice the runs).
        """
        breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
        run_first = chunks[np.r_[0, breaks]]
        run_last = chunks[np.r_[breaks - 1, len(chunks) - 1]]
        futures = []
        for first, last in zip(run_first.tolist(), run_last.tolist(), strict=True):
            stop = min((last + 1) * self.chunk, self.size)
            futures.append(self.array[first * self.chunk : stop].read())
        runs, checks = [], []
        for first, last, future in zip(run_first.tolist(), run_last.tolist(), futures, strict=True):
            try:
                data = future.result()
            except Exception as e:
                self._pinpoint(first, last, e)
            if self.verify:
                checks.append((first, _checksum_pool().submit(crc32_per_chunk, data, self.chunk)))
            runs.append(data)
        for first, check in checks:
            self._check(first, check.result())
        return run_first, runs

    def _check(self, first: int, actual: np.ndarray) -> None:
        expected = self.checksums[first : first + len(actual)]
        bad = np.flatnonzero(actual != expected)
        if bad.size:
            chunk = first + int(bad[0])
            path = chunk_file(self.root, self.name, chunk)
            state = "is missing" if not os.path.exists(path) else "is corrupted"
            raise IntegrityError(
                f"{path}: chunk {chunk} of {self.name!r} {state} (checksum {actual[bad[0]]:08x}, "
                f"manifest says {expected[bad[0]]:08x}); rebuild the store or restore the file"
            )

    def _pinpoint(self, first: int, last: int, error: Exception) -> None:
        for c in range(first, last + 1):
            try:
                self.array[c * self.chunk : min((c + 1) * self.chunk, self.size)].read().result()
            except Exception as e:
                path = chunk_file(self.root, self.name, c)
                raise IntegrityError(f"{path}: chunk {c} of {self.name!r} cannot be read ({e})") from None
        raise IntegrityError(f"{self.root}: chunks {first}..{last} of {self.name!r} cannot be read ({error})")

    def read(self, start: int, stop: int) -> np.ndarray:
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"range [{start}, {stop}) is outside {self.name!r} of size {self.size}")
        if start == stop:
            return np.zeros(0, self.array.dtype.numpy_dtype)
        run_first, (data,) = self.read_chunks(np.arange(start // self.chunk, (stop - 1) // self.chunk + 1))
        base = int(run_first[0]) * self.chunk
        return data[start - base : stop - base]


class TokenSlicer:
    """`store.tokens[a:b]`: token ids by position in the concatenated stream of all documents."""

    def __init__(self, array: _ChunkedArray):
        self._array = array

    def __len__(self) -> int:
        return self._array.size

    def __getitem__(self, key: int | slice) -> np.ndarray | int:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._array.size)
            if step != 1:
                raise ValueError("token slices must have step 1")
            return self._array.read(start, max(start, stop))
        index = range(self._array.size)[key]
        return int(self._array.read(index, index + 1)[0])


class TokenStore:
    """A built token store, opened for reading. Checksums are verified for every chunk read by default.

    >>> import tempfile
    >>> from meltemi.datastore import build_store, corpora
    >>> tmp = tempfile.mkdtemp()
    >>> files = corpora.python_stdlib()[:10]
    >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
    >>> _ = build_store(files, tok, f"{tmp}/store", progress=False)
    >>> store = TokenStore.open(f"{tmp}/store", tokenizer=tok)
    >>> store.num_docs == len(files) - store.manifest["counts"].get("empty_files", 0)
    True
    >>> int(store.offsets[-1]) == store.num_tokens
    True
    >>> bool((store.doc(3) == store.tokens[store.offsets[3] : store.offsets[4]]).all())
    True
    """

    def __init__(self, path: Path, manifest: dict[str, Any], verify: bool):
        self.path, self.manifest, self.verify = path, manifest, verify
        counts = manifest["counts"]
        self.num_tokens, self.num_docs = int(counts["tokens"]), int(counts["documents"])
        self._tokens = _chunked(path, TOKENS, self.num_tokens, manifest, verify)
        offsets = _chunked(path, OFFSETS, self.num_docs + 1, manifest, verify)
        self.offsets = offsets.read(0, self.num_docs + 1).astype(np.int64)
        self.tokens = TokenSlicer(self._tokens)

    @classmethod
    def open(cls, path: str | os.PathLike, tokenizer: str | os.PathLike | None = None, verify: bool = True):
        """Open the store at `path`; with `tokenizer` (a `tokenizer.json` or its hash), check it matches."""
        path = Path(path)
        if not (path / MANIFEST).exists():
            raise _why_not_a_store(path)
        try:
            manifest = read_json(path / MANIFEST)
        except (OSError, ValueError) as e:
            raise DatastoreError(
                f"{path / MANIFEST}: not readable JSON ({e}); the manifest is damaged"
            ) from None
        if not isinstance(manifest, dict):
            raise DatastoreError(f"{path / MANIFEST}: not a JSON object; the manifest is damaged")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise DatastoreError(
                f"{path}: token store format {manifest.get('format_version')}, "
                f"this library reads {FORMAT_VERSION}"
            )
        _check_manifest(path, manifest)
        store = cls(path, manifest, verify)
        if tokenizer is not None:
            store.check_tokenizer(tokenizer)
        return store

    @property
    def tokenizer_hash(self) -> str:
        """SHA-256 of the canonical JSON of the tokenizer the store was built with."""
        return self.manifest["tokenizer"]["sha256"]

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["tokenizer"]["vocab_size"])

    def check_tokenizer(self, tokenizer: str | os.PathLike) -> None:
        """Raise `TokenizerMismatchError` unless `tokenizer` (path or hash) is the store's tokenizer."""
        text = os.fspath(tokenizer)
        if _HEX_HASH.fullmatch(text):
            expected, name = text, "the expected tokenizer"
        elif os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                expected, name = canonical_tokenizer_hash(f.read()), text
        else:
            raise DatastoreError(
                f"expected tokenizer {text!r} is neither a tokenizer.json file nor a SHA-256 hash"
            )
        if expected != self.tokenizer_hash:
            built = self.manifest["tokenizer"]["name"]
            raise TokenizerMismatchError(
                f"{self.path} was built with tokenizer {built} (sha256 {self.tokenizer_hash}), "
                f"but the caller expects {name} (sha256 {expected})"
            )

    def doc(self, i: int) -> np.ndarray:
        """The tokens of document `i` (its EOS included when the store was built with one)."""
        i = range(self.num_docs)[i]
        return self._tokens.read(int(self.offsets[i]), int(self.offsets[i + 1]))

    def read_ranges(self, starts: np.ndarray, length: int) -> np.ndarray:
        """Tokens `[s, s + length)` for each `s` in `starts`, as a `(len(starts), length)` array."""
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        if starts.size == 0:
            return np.zeros((0, length), self._tokens.array.dtype.numpy_dtype)
        if starts.min() < 0 or starts.max() + length > self.num_tokens:
            raise IndexError(
                f"token ranges of length {length} from {starts.min()}..{starts.max()} "
                f"run past the store's {self.num_tokens} tokens"
            )
        chunk = self._tokens.chunk
        first, last = starts // chunk, (starts + length - 1) // chunk
        spans = last - first + 1
        needed = np.unique(np.repeat(first, spans) + ragged_arange(spans))
        run_first, runs = self._tokens.read_chunks(needed)
        run = np.searchsorted(run_first, first, side="right") - 1
        offset = starts - run_first[run] * chunk
        out = np.empty((len(starts), length), runs[0].dtype)
        for row, (r, o) in enumerate(zip(run.tolist(), offset.tolist(), strict=True)):
            out[row] = runs[r][o : o + length]
        return out


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
    (TOKENS, "chunk"): int,
    (TOKENS, "checksums"): list,
    (OFFSETS, "chunk"): int,
    (OFFSETS, "checksums"): list,
}


def _check_manifest(path: Path, manifest: dict) -> None:
    for (section, key), kind in _MANIFEST_FIELDS.items():
        value = manifest.get(section, {}).get(key) if isinstance(manifest.get(section), dict) else None
        if not isinstance(value, kind):
            raise DatastoreError(
                f"{path / MANIFEST}: {section}.{key} is missing or not {kind.__name__}; "
                "the manifest is damaged"
            )


def _chunked(path: Path, name: str, size: int, manifest: dict, verify: bool) -> _ChunkedArray:
    entry = manifest[name]
    return _ChunkedArray(path, name, size, int(entry["chunk"]), entry["checksums"], verify)


def _why_not_a_store(path: Path) -> DatastoreError:
    plan_path = path / BUILD_DIR / "plan.json"
    if plan_path.exists():
        plan = read_json(plan_path)
        units = len(plan["units"])
        done = sorted((path / BUILD_DIR / "parts").glob("*.json"))
        tokens = sum(read_json(p)["tokens"] for p in done)
        stage = "was assembling the arrays" if len(done) == units else "was tokenizing"
        return IncompleteStoreError(
            f"{path} is an incomplete token store: its build {stage} and stopped after "
            f"{len(done)} of {units} units ({tokens:,} tokens). "
            f"Finish it by running the build again: {plan['command']}"
        )
    if (path / BUILD_DIR).exists():
        return IncompleteStoreError(
            f"{path} is an incomplete token store: its build stopped before planning; run the build again"
        )
    if not path.exists():
        return DatastoreError(f"{path}: no such token store (the directory does not exist)")
    return DatastoreError(f"{path} is not a token store (it has no {MANIFEST})")
