"""Build a token store from text, JSONL, Parquet or Arrow: resumable, atomic, the same bytes for any workers.

The build fingerprints its inputs and plans its units of a few MiB each (`plan`, into `.build/plan.json`),
tokenizes each unit into a part (`units`), then assembles the parts into the Zarr arrays (`assembly`) and
writes `manifest.json` last. Both the units and the assembly's segments are tasks of an `Executor`: this
process, local processes, or a Ray cluster (`executors`, `ray_cluster`), with the same bytes from each. A
killed build, run again, skips the parts it has; a lease in the output (`lease`) keeps a second build of
the same store, from any host, from starting while the first runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from meltemi.datastore.build.assembly import (
    ArrayWriter,
    SegmentDone,
    assemble_segment,
    check_shards,
    content_hash,
    part_spans,
    segments,
)
from meltemi.datastore.build.executors import Executor, executor_for
from meltemi.datastore.build.inputs.files import Source
from meltemi.datastore.build.inputs.sources import InvalidUtf8, resolve_data_inputs
from meltemi.datastore.build.interrupt import Interruption
from meltemi.datastore.build.lease import Lease
from meltemi.datastore.build.output import PLAN_KEY, only_build, prepare_directory, refuse_foreign
from meltemi.datastore.build.plan import fingerprint, plan_units, unit_groups, unit_pieces
from meltemi.datastore.build.records import (
    EARLIER_INVALID_UTF8,
    OTHER_SPLIT_FILES,
    SHOWN_FILES,
    BuildReport,
    PartSummary,
    Plan,
    SourceRecord,
)
from meltemi.datastore.build.request import (
    SHIPPED_TEMPLATE,
    UNIT_BYTES,
    BuildRequest,
    LossOn,
    Overlong,
)
from meltemi.datastore.build.units import (
    STARTED,
    TokenizerInfo,
    part_keys,
    read_summaries,
    tokenize_units,
    tokenizer_of,
)
from meltemi.datastore.errors import (
    BadLineError,
    BuildInProgressError,
    DatastoreError,
    EmptyCorpusError,
    InvalidUtf8Error,
    Remedy,
    Way,
)
from meltemi.datastore.layout import (
    BUILD_DIR,
    CHAT,
    DEFAULT_CHUNK_TOKENS,
    FORMAT_VERSION,
    GROUP,
    HASH_BLOCK,
    LOSS_WEIGHTS,
    MANIFEST,
    OFFSETS,
    OFFSETS_CHUNK,
    OFFSETS_INDEX,
    OFFSETS_SHARD,
    STOPPED,
    TOKENS,
    ShardLayout,
    array_digest,
    array_sha256,
    create_array,
    group_metadata,
    offsets_index_layout,
    token_dtype,
)
from meltemi.datastore.progress import ProgressBar, Shown
from meltemi.datastore.storage import Directory, Location

SUMMARIES_PER_TASK = 1024  # finished parts' summaries one task reads, when a build resumes
REBUILD = Remedy(
    "; rebuild the store ({})",
    (Way({"overwrite": True}),),
    otherwise="; build the store in another directory",
)
_NO_RECIPE = (SHIPPED_TEMPLATE, "assistant", None, "truncate", None)  # the chat options' defaults

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe


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
    skip_bad_lines: bool = False,
    invalid_utf8: InvalidUtf8 = "error",
    format: Literal["text", "chat"] = "text",
    chat_template: str | os.PathLike = SHIPPED_TEMPLATE,
    loss_on: LossOn = "assistant",
    max_tokens: int | None = None,
    overlong: Overlong = "truncate",
    end_of_turn: str | None = None,
    recipe: ChatRecipe | None = None,
    split: str | None = None,
    subset: str | None = None,
    cluster: str | None = None,
    progress: Shown = True,
    wait: bool = True,
) -> BuildReport:
    """Tokenize `inputs` with `tokenizer` into a token store at `out` (or finish a build that stopped).

    Work is split into units of about `unit_bytes` of input, tokenized by `workers` processes (call it under
    `if __name__ == "__main__":` when `workers > 1`, as multiprocessing requires), or with `cluster` (a Ray
    address: `auto`, or the head's `host:port`) by Ray tasks over that cluster's nodes, which write the
    parts and the arrays straight into `out` (a bucket, or a disk every node mounts); the store's bytes are
    the same either way. A killed build loses at most the units in flight; a node lost mid-build loses only
    its running tasks, which Ray runs again elsewhere. A progress bar is drawn on stderr when it is a
    terminal and `progress` is set; a function as `progress` is given each moment instead
    (`progress.Progress`: a caller's own display, of several builds side by side, say).
    Tokens are stored in shard files of `shard_tokens` (by default the multiple of `chunk_tokens` nearest
    below 1M), each a run of `chunk_tokens`-long chunks with a checksum each: a reader reads and checks
    whole chunks, so small chunks waste little on short random reads. The build holds a lock on `out`: a
    second build of the same local store while one runs waits for it (saying so on stderr when `progress`
    is set), then finds the store built and returns it (or resumes what the other left, or stops as it
    would have); with `wait=False` it is an error instead, and changes nothing.

    `out` may be a local directory or a URL of the storage seam (`gs://`, `s3://`, `file://`,
    `memory://`; see `meltemi.datastore.storage`): a build into a bucket writes its parts and arrays
    there, so it resumes from any host, and makes the same bytes as a local build. The output is probed
    first, so a missing bucket or refused credentials fail before any tokenizing.

    A JSONL line that is not a JSON object with a string `text_field` stops the build with a
    `BadLineError` naming the file and line; the units already done are kept, so after fixing the line (or
    with `skip_bad_lines=True`, which skips such lines and names them in the manifest) the build resumes.
    A document (a text file, a JSONL line, a Parquet row) that is not UTF-8, a binary file say, stops it
    likewise with an `InvalidUtf8Error` naming the file and byte, unless `invalid_utf8` is `"skip"` (leave
    such documents out) or `"replace"` (replace their undecodable bytes with U+FFFD); either way they are
    counted in the summary and the manifest, which records the policy. The store is always what a fresh
    build under the last policy makes: a resumed build redoes the parts read under another one, and a
    finished store made under another one is an error unless `overwrite`.

    `format="chat"` builds a chat store from conversations (JSONL lines or Parquet rows whose
    `messages` field, or `text_field`, is a list of `{"role", "content"}`): each is rendered by
    `chat_template` (`llama3`, the shipped Llama 3 layout; a Jinja file; or a tokenizer directory's
    `tokenizer_config.json`), tokenized as one string, and its tokens weighed for the loss in a fourth
    array, `loss_weights`: 1 on the assistant's tokens (the template's `{% generation %}` blocks, found as
    transformers finds them, or for a template without them each assistant message's turn, found from
    renders of the conversation's beginnings; its end-of-turn token, `end_of_turn` or the template's
    `eos_token`, included) or on every token (`loss_on="all"`). A conversation
    over `max_tokens` is cut to it or left out (`overlong`); one the build cannot train on (malformed, an
    unknown role, no assistant token) stops it naming its file and line, or with `skip_bad_lines` is
    skipped; all are counted in the manifest. No end-of-document token is added: the template ends turns.
    A caller that has made the recipe already (`meltemi.datastore.chat.recipe.ChatRecipe`: the template
    loaded once) gives it whole as `recipe`, instead of those five options.
    A data set's directory is read for its train split, or for `split` (its test split, say), of the subset
    its card's `configs` mark default, or of `subset`.

    An error carries what would fix it as data (`DatastoreError.remedies`, `build_store` keywords): `str`
    says it in the datastore command line's flags, and a program calling this for its own users words it
    with theirs (`DatastoreError.worded`).

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
    if recipe is not None:  # the caller's, whole: the request names it as the options would
        if (os.fspath(chat_template), loss_on, max_tokens, overlong, end_of_turn) != _NO_RECIPE:
            raise ValueError("give a chat recipe or its options (chat_template, loss_on, ...), not both")
        format, chat_template, loss_on, max_tokens, overlong, end_of_turn = "chat", *recipe.options()
    request = BuildRequest(
        inputs=tuple(os.fspath(i) for i in inputs),
        tokenizer=os.fspath(tokenizer),
        out=os.fspath(out),
        text_field=text_field,
        workers=workers,
        eos=eos,
        eos_token=eos_token,
        overwrite=overwrite,
        chunk_tokens=chunk_tokens,
        shard_tokens=shard_tokens,
        unit_bytes=unit_bytes,
        skip_bad_lines=skip_bad_lines,
        invalid_utf8=invalid_utf8,
        format=format,
        chat_template=os.fspath(chat_template),
        loss_on=loss_on,
        max_tokens=max_tokens,
        overlong=overlong,
        end_of_turn=end_of_turn,
        split=split,
        subset=subset,
        cluster=cluster,
    )
    chat = recipe if recipe is not None else request.chat_recipe()
    out, options = Directory(out), request.options(chat)
    if out.location.scheme == "memory" and (workers > 1 or cluster is not None):
        raise ValueError(f"{out.location}: memory:// lives in one process; build it with workers=1")
    info = TokenizerInfo.load(tokenizer, eos=options.eos, eos_token=eos_token)
    if chat is not None:
        chat.check_tokenizer(tokenizer_of(info), info.name)
    chosen = resolve_data_inputs(  # a data set's README is not data, nor its test split
        list(request.inputs), request.split, request.subset, chat=chat is not None
    )
    say = _on_stderr if progress else _nowhere
    with (
        Interruption(str(out.location), say) as interruption,  # Ctrl-C: stop between units, keep them
        executor_for(request.workers, request.cluster) as executor,
        only_build(out, wait=wait, say=say),
        Lease(out, before=refuse_foreign) as lease,
    ):
        sources = fingerprint(chosen.files, unit_bytes, _known_sources(out), executor, progress)
        plan = plan_units(info, sources, options, request.command())
        prepare_directory(out, plan, request)
        if out.exists(MANIFEST):
            return _already_built(out)
        try:
            summaries, kept = _tokenize(
                out.location / BUILD_DIR, plan, sources, info, request, progress, chat, executor, interruption
            )
        except (BadLineError, InvalidUtf8Error) as error:
            raise _stopped(out, error, request) from None
        counts = sum((Counter(s.counts) for s in summaries), Counter())
        other_splits = chosen.other_splits
        if other_splits:
            counts[OTHER_SPLIT_FILES] = sum(other_splits.values())
        documents, tokens = sum(s.documents for s in summaries), sum(s.tokens for s in summaries)
        report = BuildReport(
            str(out.location),
            documents,
            tokens,
            dict(counts),
            invalid_utf8_files=sorted({f for s in summaries for f in s.invalid_utf8_files}),
            skipped_lines=[line for s in summaries for line in s.skipped_lines],
            invalid_utf8=request.invalid_utf8,
            format=request.format,
            split=chosen.split if other_splits else None,
            other_splits=other_splits,
            subset=chosen.subset,
            where=executor.where,
            nodes=executor.nodes,
            repeated_units=_repeated_units(out),
            kept_units=kept,
        )
        if documents == 0:
            out.delete_prefix(f"{BUILD_DIR}/")
            files = f"{len(sources)} file{'s' * (len(sources) != 1)}"
            given, hidden = ", ".join(request.inputs[:SHOWN_FILES]), len(request.inputs) - SHOWN_FILES
            item = "conversation" if chat is not None else "document"
            raise EmptyCorpusError(
                f"{given}{f' and {hidden} more' if hidden > 0 else ''}: no non-empty {item} to build from "
                f"({files}: {report.notes()})"
            )
        arrays = _assemble(out, plan, info, summaries, report, progress, chat, executor, interruption)
        if lease.lost is not None:
            raise BuildInProgressError(f"{out.location}: {lease.lost}; run the build again")
        out.write_json(
            MANIFEST, _manifest(plan, info, report, arrays, chat)
        )  # last: what makes the store complete
        out.delete_prefix(f"{BUILD_DIR}/")
    report.seconds = time.perf_counter() - started
    return report


def _known_sources(out: Directory) -> list[SourceRecord]:
    """What an earlier build of `out` recorded of its inputs (its plan, else its manifest), so that inputs
    whose stamps have not changed are not read again."""
    for key in (PLAN_KEY, MANIFEST):
        recorded = out.read_json(key)
        if isinstance(recorded, dict) and isinstance(recorded.get("sources"), list):
            try:
                return [SourceRecord(**source) for source in recorded["sources"]]
            except TypeError:  # written by another version: read everything again
                return []
    return []


def _repeated_units(out: Directory) -> int:
    """How many units were started more than once (a worker or node lost while running them, or a driver
    stopped and run again), from the markers each attempt leaves."""
    markers = f"{BUILD_DIR}/{STARTED}/"  # listed keys start with it: the unit is the name's first part
    attempts = Counter(key.removeprefix(markers).split(".")[0] for key in out.list(markers))
    return sum(1 for count in attempts.values() if count > 1)


def _on_stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _nowhere(line: str) -> None:
    pass


def _already_built(out: Directory) -> BuildReport:
    manifest = out.read_json(MANIFEST)
    counts = manifest["counts"]
    return BuildReport(
        str(out.location),
        counts["documents"],
        counts["tokens"],
        {key: n for key, n in counts.items() if key not in ("documents", "tokens")},
        already_built=True,
        invalid_utf8_files=manifest.get("invalid_utf8_files", []),
        skipped_lines=manifest.get("skipped_lines", []),
        invalid_utf8=manifest.get("invalid_utf8", EARLIER_INVALID_UTF8),
        format=manifest.get("format", "text"),
        split=manifest.get("split"),
        other_splits=manifest.get("other_splits", {}),
        subset=manifest.get("subset"),
    )


def _stopped(out: Directory, error: BadLineError | InvalidUtf8Error, request: BuildRequest) -> DatastoreError:
    """`error` with the ways to go on (fix the input and run the build again, or run it with another
    policy), recorded as data for `TokenStore.open`'s message."""
    if isinstance(error, BadLineError):
        what, ways = "line", {"skip such lines, counted and named in the manifest": {"skip_bad_lines": True}}
    else:
        what = "line" if error.line is not None else "row" if error.row is not None else "file"
        ways = {
            "leave out each document that is not UTF-8": {"invalid_utf8": "skip"},
            "replace its undecodable bytes with U+FFFD": {"invalid_utf8": "replace"},
        }
    fix = Remedy(f". Fix that {what} and {{}} (the build starts over from the fixed file)", rerun=True)
    others = [Remedy(f", or {way}: {{}}", (Way(changes),), rerun=True) for way, changes in ways.items()]
    stopped = error.with_remedies(fix, *others, request=request)
    remedies = [remedy.to_json() for remedy in stopped.remedies]
    record = {"cause": stopped.cause, "remedies": remedies, "request": dataclasses.asdict(request)}
    out.write_json(f"{BUILD_DIR}/{STOPPED}", record)
    return stopped


def _tokenize(
    build_dir: Location,
    plan: Plan,
    sources: list[Source],
    info: TokenizerInfo,
    request: BuildRequest,
    progress: Shown,
    chat: ChatRecipe | None,
    executor: Executor,
    interruption: Interruption,
) -> tuple[list[PartSummary], int]:
    """Tokenize every unit without a part, and every part read under another `invalid_utf8` policy that
    it would change, as `executor`'s tasks; the summaries of all the parts, in unit order, and how many
    an earlier build had made. Ctrl-C stops it between units (`interruption`), the parts made kept."""
    units, policy = plan.units, request.reading()
    summaries: dict[int, PartSummary] = {}
    parts = Directory(build_dir)
    listed = set(parts.list("parts/"))
    done = [unit for unit in range(len(units)) if part_keys(unit)[2] in listed]
    reads = [(build_dir, done[i : i + SUMMARIES_PER_TASK]) for i in range(0, len(done), SUMMARIES_PER_TASK)]
    for found in executor.run(read_summaries, reads):  # a resumed build's finished parts, read in parallel
        summaries.update((s.unit, s) for s in found if s.fits(policy.invalid_utf8))
    todo = [u for u in range(len(units)) if u not in summaries]
    kept = len(summaries)
    interruption.resuming(kept, len(units))
    if executor.workers == 1:  # one process: consecutive units in one stream of encode_batch calls
        groups = unit_groups(todo, units, sources, plan.options.unit_bytes)
    else:
        groups = [[unit] for unit in todo]
    jobs = [
        (build_dir, [(u, unit_pieces(units[u], sources)) for u in group], info, policy, chat)
        for group in groups
    ]

    def invalid(summary: PartSummary) -> int:
        return summary.counts.get("invalid_utf8_documents", 0)

    with ProgressBar(len(units), "tokenizing", enabled=progress, invalid_utf8=policy.invalid_utf8) as bar:
        bar.advance(
            len(summaries),
            sum(s.documents for s in summaries.values()),
            sum(s.tokens for s in summaries.values()),
            sum(invalid(s) for s in summaries.values()),
        )
        for finished in executor.run(tokenize_units, jobs):
            bar.nodes = executor.nodes
            for summary in finished:
                summaries[summary.unit] = summary
                bar.advance(1, summary.documents, summary.tokens, invalid(summary))
            interruption.check(len(summaries), len(units))
    return [summaries[u] for u in range(len(units))], kept


def _assemble(
    out: Directory,
    plan: Plan,
    info: TokenizerInfo,
    summaries: list[PartSummary],
    report: BuildReport,
    progress: Shown,
    chat: ChatRecipe | None,
    executor: Executor,
    interruption: Interruption,
) -> dict[str, tuple[ShardLayout, str]]:
    """Assemble the parts into `tokens`, `offsets` (and a chat store's `loss_weights`) as `executor`'s
    tasks, a segment of shards each, then `offsets_index` from what the offsets' tasks hand back; each
    array's layout and composed SHA-256."""
    build_dir = out / BUILD_DIR
    options = plan.options
    layouts = {
        TOKENS: ShardLayout(
            report.tokens, token_dtype(info.vocab_size), options.chunk_tokens, options.shard_tokens
        ),
        OFFSETS: ShardLayout(report.documents + 1, np.dtype(np.uint64), OFFSETS_CHUNK, OFFSETS_SHARD),
    }
    if chat is not None:
        layouts[LOSS_WEIGHTS] = ShardLayout(
            report.tokens, np.dtype(np.uint8), options.chunk_tokens, options.shard_tokens
        )
    for name, layout in layouts.items():
        create_array(out, name, layout)
    spans = part_spans(summaries)
    jobs = [
        (str(out.location), str(build_dir.location), segment, layout)
        for name, layout in layouts.items()
        for segment in segments(name, layout, spans)
    ]
    finished: dict[str, list[SegmentDone]] = {name: [] for name in layouts}
    with ProgressBar(len(jobs), "assembling", enabled=progress) as bar:
        for segment in executor.run(assemble_segment, jobs):
            finished[segment.array].append(segment)
            bar.nodes = executor.nodes
            bar.advance(1)
            interruption.check(len(summaries), len(summaries))  # the parts stay: the assembly starts over
    hashes: dict[str, str] = {}
    for name, layout in layouts.items():
        done = sorted(finished[name], key=lambda segment: segment.index)
        digests = [digest for segment in done for digest in segment.digests]
        if sum(s.shards for s in done) != layout.num_shards or len(digests) != -(-layout.size // HASH_BLOCK):
            raise DatastoreError(
                f"{name}: the assembly's tasks did not write every shard", remedies=(REBUILD,)
            )
        hashes[name] = array_digest(digests)
    entries = [s.index_entries for s in sorted(finished[OFFSETS], key=lambda s: s.index)]
    index = np.concatenate(entries) if entries else np.zeros(0, np.uint64)
    index_layout = offsets_index_layout(report.documents)
    writer = ArrayWriter(out, OFFSETS_INDEX, index_layout)
    writer.append(index)
    writer.finish(REBUILD)
    check_shards(out, OFFSETS_INDEX, index_layout)
    layouts[OFFSETS_INDEX] = index_layout
    hashes[OFFSETS_INDEX] = array_sha256([index], FORMAT_VERSION)
    out.write_json(GROUP, group_metadata())
    return {name: (layout, hashes[name]) for name, layout in layouts.items()}


def _manifest(
    plan: Plan,
    info: TokenizerInfo,
    report: BuildReport,
    arrays: dict[str, tuple[ShardLayout, str]],
    chat: ChatRecipe | None,
) -> dict:
    """The store's manifest: what it was built from and how, its counts, and each array's layout and
    SHA-256 (format 3: composed from its blocks', `layout.array_digest`)."""
    recorded = plan.to_json()
    manifest = {key: recorded[key] for key in ("format_version", "tokenizer", "options")}
    manifest["sources"] = [source.to_manifest() for source in plan.sources]
    if chat is not None:
        manifest["format"] = CHAT
        manifest["chat"] = chat.to_manifest() | {
            "end_of_turn_id": chat.check_tokenizer(tokenizer_of(info), info.name)
        }
    manifest["counts"] = {"documents": report.documents, "tokens": report.tokens} | report.counts
    if report.split is not None:
        manifest["split"], manifest["other_splits"] = report.split, report.other_splits
    if report.subset is not None:
        manifest["subset"] = report.subset
    manifest["invalid_utf8"] = report.invalid_utf8
    manifest["invalid_utf8_files"] = report.invalid_utf8_files
    manifest["skipped_lines"] = report.skipped_lines
    for name, (layout, sha256) in arrays.items():
        manifest[name] = layout.describe() | {"sha256": sha256}
    manifest["content_sha256"] = content_hash(
        arrays[TOKENS][0].dtype,
        arrays[TOKENS][1],
        arrays[OFFSETS][1],
        arrays[LOSS_WEIGHTS][1] if LOSS_WEIGHTS in arrays else None,
    )
    manifest["checksums"] = {
        "per_chunk": "crc32c",
        "stored": "after each chunk's values, in its shard (Zarr v3 crc32c codec)",
        "chunks": {name: layout.num_chunks for name, (layout, _) in arrays.items()},
        "per_array": (
            f"sha256 over the sha256s of its blocks of {HASH_BLOCK} values (the last: what is left), each "
            "of the block's little-endian values, whatever the layout"
        ),
    }
    return manifest
