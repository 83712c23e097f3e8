"""Build a token store from text, JSONL or Parquet: resumable, atomic, the same bytes for any worker count.

The build plans its work (sources, their hashes, units of a few MiB each) into `.build/plan.json`,
tokenizes each unit into a part file (in N processes), then assembles the parts, in unit order, into the
Zarr arrays and writes `manifest.json` last. A killed build, run again, skips the parts it has.
"""

import contextlib
import fcntl
import multiprocessing
import os
import shlex
import shutil
import time
from collections import Counter
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
    OFFSETS_INDEX,
    OFFSETS_SHARD,
    TOKENS,
    ShardLayout,
    default_shard_tokens,
    group_metadata,
    read_json,
    token_dtype,
    write_json_atomically,
)
from meltemi.datastore.progress import ProgressBar, human
from meltemi.datastore.sources import Piece, Source, describe_source, redact, resolve_inputs
from meltemi.datastore.tokenizing import (
    TokenizerInfo,
    part_paths,
    quiet_worker,
    tokenize_unit,
    tokenize_units,
)
from meltemi.datastore.writing import ArrayWriter, check_shards, content_hash

UNIT_BYTES = 4 << 20
MIN_UNIT_BYTES = 64 << 10
UNITS_PER_CORPUS = 16
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
    shard_tokens: int | None = None,
    unit_bytes: int = UNIT_BYTES,
    progress: bool = True,
) -> BuildReport:
    """Tokenize `inputs` with `tokenizer` into a token store at `out` (or finish a build that stopped).

    Work is split into units of about `unit_bytes` of input, tokenized by `workers` processes (call it under
    `if __name__ == "__main__":` when `workers > 1`, as multiprocessing requires); a killed build loses at
    most the units in flight. A progress bar is drawn on stderr when it is a terminal and `progress` is set.
    Tokens are stored in shard files of `shard_tokens` (by default the multiple of `chunk_tokens` nearest
    below 1M), each a run of `chunk_tokens`-long chunks with a checksum each: a reader reads and checks
    whole chunks, so small chunks waste little on short random reads. The build holds a lock on `out`: a
    second build of the same store while one runs is an error, and changes nothing.

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
    if shard_tokens is None:
        shard_tokens = default_shard_tokens(chunk_tokens)
    if shard_tokens < chunk_tokens or shard_tokens % chunk_tokens:
        raise ValueError(
            f"shard_tokens must be a positive multiple of chunk_tokens ({chunk_tokens}), got {shard_tokens}"
        )
    info = TokenizerInfo.load(tokenizer, eos=eos, eos_token=eos_token)
    urls = resolve_inputs([os.fspath(i) for i in inputs])
    sources = [describe_source(url, split_bytes=unit_bytes) for url in urls]
    options = {
        "text_field": text_field,
        "eos": eos,
        "chunk_tokens": chunk_tokens,
        "shard_tokens": shard_tokens,
        "unit_bytes": unit_bytes,
    }
    command = _command(inputs, tokenizer, out, workers, eos_token, options)
    plan = _plan(info, sources, options, command)
    with _only_build(out):
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


@contextlib.contextmanager
def _only_build(out: Path):
    """Hold an exclusive lock on the output directory, so that two builds never write one store."""
    if out.exists() and not out.is_dir():
        raise DatastoreError(f"output {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatastoreError(
                f"another build of {str(out)!r} is running; wait for it to finish (or stop it) and run again"
            ) from None
        yield
    finally:
        os.close(descriptor)


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
    words += (
        []
        if options["shard_tokens"] == default_shard_tokens(options["chunk_tokens"])
        else ["--shard-tokens", str(options["shard_tokens"])]
    )
    words += [] if options["unit_bytes"] == UNIT_BYTES else ["--unit-bytes", str(options["unit_bytes"])]
    return shlex.join(words)


def _plan(info: TokenizerInfo, sources: list[Source], options: dict, command: str) -> dict[str, Any]:
    """Sources, tokenizer and options, and the units of work: runs of source pieces.

    A unit holds about `unit_bytes` of input, or less for a small corpus, so that it still makes at least
    `UNITS_PER_CORPUS` units and workers share the work evenly. Units depend only on the inputs and
    options, never on the worker count. A unit is a list of `[source index, start, stop or None, line]`.
    """
    pieces = [(index, piece) for index, source in enumerate(sources) for piece in source.pieces()]
    total = sum(piece.size for _, piece in pieces)
    target = min(options["unit_bytes"], max(MIN_UNIT_BYTES, total // UNITS_PER_CORPUS))
    units, unit, size = [], [], 0
    for position, (index, piece) in enumerate(pieces):
        unit.append([index, piece.start, piece.stop, piece.first_line])
        size += piece.size
        if size >= target or position == len(pieces) - 1:
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
    for name in (MANIFEST, GROUP, TOKENS, OFFSETS, OFFSETS_INDEX, BUILD_DIR):
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


def _groups(todo: list[int], units: list, sources: list[Source], group_bytes: int) -> list[list[int]]:
    """Consecutive units of about `group_bytes` of input together: one process tokenizes them in one go."""
    groups, group, size = [], [], 0
    for unit in todo:
        group.append(unit)
        size += sum(piece.size for piece in _pieces(units[unit], sources))
        if size >= group_bytes:
            groups.append(group)
            group, size = [], 0
    return groups + [group] if group else groups


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
            for group in _groups(todo, units, sources, plan["options"]["unit_bytes"]):
                jobs = [(unit, _pieces(units[unit], sources)) for unit in group]
                for summary in tokenize_units(build_dir, jobs, info, text_field):
                    summaries[summary["unit"]] = summary
                    bar.advance(1, summary["documents"], summary["tokens"])
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
    """Stream the parts, in unit order, into `tokens`, `offsets` and `offsets_index`, then commit."""
    build_dir = out / BUILD_DIR
    options = plan["options"]
    total_tokens = sum(s["tokens"] for s in summaries)
    total_docs = sum(s["documents"] for s in summaries)
    layouts = {
        TOKENS: ShardLayout(
            total_tokens, token_dtype(info.vocab_size), options["chunk_tokens"], options["shard_tokens"]
        ),
        OFFSETS: ShardLayout(total_docs + 1, np.dtype(np.uint64), OFFSETS_CHUNK, OFFSETS_SHARD),
        OFFSETS_INDEX: ShardLayout(
            -(-(total_docs + 1) // OFFSETS_CHUNK), np.dtype(np.uint64), OFFSETS_CHUNK, OFFSETS_SHARD
        ),
    }
    writers = {name: ArrayWriter(out, name, layout) for name, layout in layouts.items()}
    writers[OFFSETS].append(np.zeros(1, np.uint64))
    writers[OFFSETS_INDEX].append(np.zeros(1, np.uint64))
    position, documents = 0, 1
    with ProgressBar(len(summaries), "assembling", enabled=progress) as bar:
        for unit, summary in enumerate(summaries):
            tokens_path, lengths_path, _ = part_paths(build_dir, unit)
            writers[TOKENS].append(np.load(tokens_path, allow_pickle=False))
            offsets = position + np.cumsum(np.load(lengths_path, allow_pickle=False), dtype=np.uint64)
            writers[OFFSETS].append(offsets)
            writers[OFFSETS_INDEX].append(offsets[-documents % OFFSETS_CHUNK :: OFFSETS_CHUNK])
            position, documents = int(offsets[-1]) if offsets.size else position, documents + offsets.size
            bar.advance(1, summary["documents"], summary["tokens"])
    digests = {name: writer.finish() for name, writer in writers.items()}
    for name, layout in layouts.items():
        check_shards(out, name, layout)
    manifest = {key: plan[key] for key in ("format_version", "tokenizer", "options", "sources")}
    manifest["counts"] = {"documents": total_docs, "tokens": total_tokens} | counts
    for name, layout in layouts.items():
        manifest[name] = layout.describe() | {"sha256": digests[name]}
    manifest["content_sha256"] = content_hash(layouts[TOKENS].dtype, digests[TOKENS], digests[OFFSETS])
    manifest["checksums"] = {
        "per_chunk": "crc32c",
        "stored": "after each chunk's values, in its shard (Zarr v3 crc32c codec)",
        "chunks": {name: layout.num_chunks for name, layout in layouts.items()},
        "per_array": "sha256 of the little-endian values, in each array's entry",
    }
    write_json_atomically(out / GROUP, group_metadata())
    write_json_atomically(out / MANIFEST, manifest)
    shutil.rmtree(build_dir)
