"""Build a token store from text, JSONL or Parquet: resumable, atomic, the same bytes for any worker count.

The build plans its work (sources, their hashes, units of a few MiB each) into `.build/plan.json`,
tokenizes each unit into a part file (in N processes), then assembles the parts, in unit order, into the
Zarr arrays and writes `manifest.json` last. A killed build, run again, skips the parts it has.
"""

import multiprocessing
import os
import shlex
import shutil
import sys
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from meltemi.datastore.errors import DatastoreError, EmptyCorpusError, SourceChangedError
from meltemi.datastore.layout import (
    BUILD_DIR,
    DEFAULT_CHUNK_TOKENS,
    FORMAT_VERSION,
    GROUP,
    MANIFEST,
    OFFSETS,
    OFFSETS_CHUNK,
    TOKENS,
    chunk_checksums,
    create_array,
    group_metadata,
    read_json,
    token_dtype,
    write_json_atomically,
)
from meltemi.datastore.progress import ProgressBar, human
from meltemi.datastore.sources import Piece, Source, describe_source, redact, resolve_inputs
from meltemi.datastore.tokenizing import TokenizerInfo, part_paths, quiet_worker, tokenize_unit

UNIT_BYTES = 4 << 20
WRITE_CHUNKS = 64
MAX_PENDING_WRITES = 4  # slabs of WRITE_CHUNKS chunks in flight, so memory stays bounded
PLAN = "plan.json"


@dataclass
class BuildReport:
    """What a build did: counts of documents and tokens, repaired and skipped inputs, and the time taken."""

    out: str
    documents: int
    tokens: int
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    already_built: bool = False

    def summary(self) -> str:
        if self.already_built:
            size = f"{human(self.documents)} docs, {human(self.tokens)} tokens"
            return f"{self.out}: already built ({size}); nothing to do"
        notes = "".join(f", {n} {k.replace('_', ' ')}" for k, n in sorted(self.counts.items()) if n)
        rate = self.tokens / max(self.seconds, 1e-9)
        return (
            f"{self.out}: built {self.documents:,} docs, {self.tokens:,} tokens in {self.seconds:.1f}s "
            f"({human(rate)} tokens/s){notes}"
        )


def build_store(
    inputs: str | Sequence[str],
    tokenizer: str | os.PathLike,
    out: str | os.PathLike,
    *,
    text_field: str = "text",
    workers: int = 1,
    eos: bool = True,
    eos_token: str | None = None,
    overwrite: bool = False,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    unit_bytes: int = UNIT_BYTES,
    progress: bool = True,
) -> BuildReport:
    """Tokenize `inputs` with `tokenizer` into a token store at `out` (or finish a build that stopped).

    Work is split into units of about `unit_bytes` of input, tokenized by `workers` processes (call it under
    `if __name__ == "__main__":` when `workers > 1`, as multiprocessing requires); a killed build loses at
    most the units in flight. A progress bar is drawn on stderr when it is a terminal and `progress` is set.

    >>> import pathlib, tempfile
    >>> from meltemi.datastore import corpora
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (tmp / "a.py").write_text("def f(x): return x + 1")
    >>> _ = (tmp / "b.py").write_text("import os; print(os.getcwd())")
    >>> files = [str(tmp / "a.py"), str(tmp / "b.py")]
    >>> tok = corpora.train_tokenizer(files, vocab_size=300, out=tmp / "tokenizer.json")
    >>> build_store(files, tok, tmp / "store", progress=False).documents
    2
    """
    started = time.perf_counter()
    inputs = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    out = Path(out)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if chunk_tokens < 1 or unit_bytes < 1:
        raise ValueError(f"chunk_tokens and unit_bytes must be positive, got {chunk_tokens}, {unit_bytes}")
    info = TokenizerInfo.load(tokenizer, eos=eos, eos_token=eos_token)
    urls = resolve_inputs([os.fspath(i) for i in inputs])
    sources = [describe_source(url, split_bytes=unit_bytes) for url in urls]
    options = {"text_field": text_field, "eos": eos, "chunk_tokens": chunk_tokens, "unit_bytes": unit_bytes}
    command = _command(inputs, tokenizer, out, workers, eos_token, options)
    plan = _plan(info, sources, options, command)
    _prepare_directory(out, plan, overwrite)
    if (out / MANIFEST).exists():
        manifest = read_json(out / MANIFEST)
        counts = manifest["counts"]
        return BuildReport(str(out), counts["documents"], counts["tokens"], already_built=True)
    summaries = _tokenize(out / BUILD_DIR, plan, sources, info, text_field, workers, progress)
    counts = sum((Counter(s["counts"]) for s in summaries), Counter())
    documents, tokens = sum(s["documents"] for s in summaries), sum(s["tokens"] for s in summaries)
    if documents == 0:
        shutil.rmtree(out / BUILD_DIR)
        raise EmptyCorpusError(f"the inputs hold no non-empty document ({len(sources)} files, all empty)")
    _assemble(out, plan, info, summaries, dict(counts), progress)
    return BuildReport(str(out), documents, tokens, dict(counts), time.perf_counter() - started)


def _command(inputs, tokenizer, out, workers: int, eos_token: str | None, options: dict) -> str:
    """The command line that (re)runs this build, for messages that say how to finish it."""
    words = ["python", "-m", "meltemi.datastore", "build", "--input", *(redact(os.fspath(i)) for i in inputs)]
    words += ["--tokenizer", redact(os.fspath(tokenizer)), "--out", os.fspath(out), "--workers", str(workers)]
    words += [] if options["text_field"] == "text" else ["--text-field", options["text_field"]]
    words += [] if options["eos"] else ["--no-eos"]
    words += [] if eos_token is None else ["--eos-token", eos_token]
    words += (
        []
        if options["chunk_tokens"] == DEFAULT_CHUNK_TOKENS
        else ["--chunk-tokens", str(options["chunk_tokens"])]
    )
    words += [] if options["unit_bytes"] == UNIT_BYTES else ["--unit-bytes", str(options["unit_bytes"])]
    return shlex.join(words)


def _plan(info: TokenizerInfo, sources: list[Source], options: dict, command: str) -> dict[str, Any]:
    """Sources, tokenizer and options, and the units of work: runs of source pieces of about `unit_bytes`.

    A unit is a list of `[source index, start byte, stop byte or None, first line]`.
    """
    pieces = [(index, piece) for index, source in enumerate(sources) for piece in source.pieces()]
    units, unit, size = [], [], 0
    for position, (index, piece) in enumerate(pieces):
        unit.append([index, piece.start, piece.stop, piece.first_line])
        size += piece.size
        if size >= options["unit_bytes"] or position == len(pieces) - 1:
            units.append(unit)
            unit, size = [], 0
    return {
        "format_version": FORMAT_VERSION,
        "tokenizer": info.identity(),
        "options": options,
        "sources": [{"url": s.name, "size": s.size, "sha256": s.sha256} for s in sources],
        "units": units,
        "command": command,
    }


def _pieces(unit: list[list], sources: list[Source]) -> list[Piece]:
    return [Piece(sources[index], start, stop, first_line) for index, start, stop, first_line in unit]


def _prepare_directory(out: Path, plan: dict, overwrite: bool) -> None:
    """Check `out` against `plan`: start fresh, resume, or stop because the inputs changed."""
    plan_path = out / BUILD_DIR / PLAN
    if out.exists() and not out.is_dir():
        raise DatastoreError(f"output {str(out)!r} exists and is not a directory")
    previous = None
    if (out / MANIFEST).exists():
        previous = read_json(out / MANIFEST)
    elif plan_path.exists():
        previous = read_json(plan_path)
    elif out.exists() and any(out.iterdir()) and not (out / BUILD_DIR).exists():
        raise DatastoreError(f"output {str(out)!r} is a non-empty directory that is not a token store")
    if previous is not None:
        difference = _difference(previous, plan)
        if difference and not overwrite:
            raise SourceChangedError(
                f"{str(out)!r} was built from different inputs: {difference}; "
                "pass --overwrite (overwrite=True) to rebuild it"
            )
        if not difference:
            if (out / MANIFEST).exists():
                shutil.rmtree(out / BUILD_DIR, ignore_errors=True)
            return
    for name in (MANIFEST, GROUP, TOKENS, OFFSETS, BUILD_DIR):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    (out / BUILD_DIR / "parts").mkdir(parents=True)
    write_json_atomically(plan_path, plan)


def _difference(previous: dict, plan: dict) -> str | None:
    """The first way `plan` differs from what a store or half-built store was made from, in words."""
    if previous.get("format_version") != plan["format_version"]:
        return f"format version {previous.get('format_version')} != {plan['format_version']}"
    old = {s["url"]: s for s in previous["sources"]}
    new = {s["url"]: s for s in plan["sources"]}
    for url in sorted(old.keys() | new.keys()):
        if url not in new:
            return f"source {url} is no longer among the inputs"
        if url not in old:
            return f"source {url} is new"
        if old[url] != new[url]:
            return (
                f"source {url} changed (size {old[url]['size']} -> {new[url]['size']}, content hash differs)"
            )
    if previous["tokenizer"] != plan["tokenizer"]:
        return (
            f"tokenizer {previous['tokenizer']['name']} ({previous['tokenizer']['sha256'][:12]}) "
            f"!= {plan['tokenizer']['name']} ({plan['tokenizer']['sha256'][:12]})"
        )
    if previous["options"] != plan["options"]:
        return f"options {previous['options']} != {plan['options']}"
    return None


def _tokenize(build_dir, plan, sources, info, text_field, workers, progress) -> list[dict]:
    units = plan["units"]
    summaries: dict[int, dict] = {}
    for unit in range(len(units)):
        summary_path = part_paths(build_dir, unit)[2]
        if summary_path.exists():
            summaries[unit] = read_json(summary_path)
    todo = [u for u in range(len(units)) if u not in summaries]
    with ProgressBar(len(units), "tokenizing", enabled=progress) as bar:
        bar.advance(
            len(summaries),
            sum(s["documents"] for s in summaries.values()),
            sum(s["tokens"] for s in summaries.values()),
        )
        if workers == 1 or len(todo) <= 1:
            for unit in todo:
                summaries[unit] = tokenize_unit(
                    build_dir, unit, _pieces(units[unit], sources), info, text_field
                )
                bar.advance(1, summaries[unit]["documents"], summaries[unit]["tokens"])
        else:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(
                min(workers, len(todo)), mp_context=context, initializer=quiet_worker
            ) as pool:
                pending = {
                    pool.submit(tokenize_unit, build_dir, u, _pieces(units[u], sources), info, text_field)
                    for u in todo
                }
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    for future in finished:
                        if future.exception() is not None:
                            for other in pending:
                                other.cancel()
                            raise future.exception()
                        summary = future.result()
                        summaries[summary["unit"]] = summary
                        bar.advance(1, summary["documents"], summary["tokens"])
    return [summaries[u] for u in range(len(units))]


def _assemble(
    out: Path, plan: dict, info: TokenizerInfo, summaries: list[dict], counts: dict, progress
) -> None:
    """Concatenate the parts into `tokens` and `offsets`, checksum every chunk, then commit the manifest."""
    build_dir = out / BUILD_DIR
    chunk = plan["options"]["chunk_tokens"]
    dtype = token_dtype(info.vocab_size)
    total_tokens = sum(s["tokens"] for s in summaries)
    tokens_array = create_array(out, TOKENS, total_tokens, dtype, chunk)
    slab = chunk * WRITE_CHUNKS
    buffer, written, checksums, writes, lengths = [], 0, [], deque(), []
    with ProgressBar(len(summaries), "assembling", enabled=progress) as bar:
        for unit, summary in enumerate(summaries):
            tokens_path, lengths_path, _ = part_paths(build_dir, unit)
            buffer.append(np.load(tokens_path, allow_pickle=False))
            lengths.append(np.load(lengths_path, allow_pickle=False))
            pending = np.concatenate(buffer)
            full = len(pending) // slab * slab
            if full:
                writes.append(tokens_array[written : written + full].write(pending[:full]))
                while len(writes) > MAX_PENDING_WRITES:
                    writes.popleft().result()
                checksums += chunk_checksums(pending[:full], chunk)
                written += full
            buffer = [pending[full:]]
            bar.advance(1, summary["documents"], summary["tokens"])
    tail = np.concatenate(buffer)
    writes.append(tokens_array[written : written + len(tail)].write(tail))
    checksums += chunk_checksums(tail, chunk)
    offsets = np.concatenate([np.zeros(1, np.uint64), np.cumsum(np.concatenate(lengths), dtype=np.uint64)])
    writes.append(
        create_array(out, OFFSETS, len(offsets), np.dtype(np.uint64), OFFSETS_CHUNK)[:].write(offsets)
    )
    for write in writes:
        write.result()
    manifest = {key: plan[key] for key in ("format_version", "tokenizer", "options", "sources")}
    manifest["counts"] = {"documents": len(offsets) - 1, "tokens": total_tokens} | counts
    manifest[TOKENS] = {"dtype": dtype.name, "chunk": chunk, "checksums": checksums}
    manifest[OFFSETS] = {
        "dtype": "uint64",
        "chunk": OFFSETS_CHUNK,
        "checksums": chunk_checksums(offsets, OFFSETS_CHUNK),
    }
    write_json_atomically(out / GROUP, group_metadata())
    _sync_tree(out)
    write_json_atomically(out / MANIFEST, manifest)
    shutil.rmtree(build_dir)


def _sync_tree(out: Path) -> None:
    """Flush the arrays' files to disk before the manifest makes them visible."""
    if sys.platform != "linux":
        return
    for array in (TOKENS, OFFSETS):
        for root, _, files in os.walk(out / array):
            for name in files:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
