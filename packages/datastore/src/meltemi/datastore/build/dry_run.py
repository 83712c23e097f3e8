"""A build planned before it spends: its inputs listed (never read), its units, its workers, the objects
it would write, each worker's peak memory and its expected wall time at a measured per-core rate.

Local files are sized by their listing (`stat`); a bucket object's size is not in TensorStore's listing, so a
sample of up to `SIZE_SAMPLE` objects, spread over the listing, is sized by ranged one-byte reads and the
rest estimated from it (said so). Tokens are estimated at `bytes_per_token`; nothing is tokenized.

>>> import pathlib, tempfile
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = (root / "a.txt").write_text("x" * 1000)
>>> estimate = estimate_build([str(root / "a.txt")], unit_bytes=4 << 20, workers=2, rate=357_000.0)
>>> estimate.units, estimate.input_bytes, estimate.sizes_estimated
(1, 1000, False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from meltemi.datastore.build.inputs.files import _in_bucket, cut_at_lines, redact
from meltemi.datastore.build.inputs.sources import resolve_data_inputs
from meltemi.datastore.build.output import PLAN_KEY
from meltemi.datastore.build.plan import MIN_UNIT_BYTES, UNITS_PER_CORPUS
from meltemi.datastore.build.request import BuildRequest
from meltemi.datastore.build.units import BATCH_CHARACTERS
from meltemi.datastore.errors import InputError
from meltemi.datastore.layout import (
    BUILD_DIR,
    DEFAULT_CHUNK_TOKENS,
    MANIFEST,
    OFFSETS_SHARD,
    default_shard_tokens,
)
from meltemi.datastore.progress import human
from meltemi.datastore.storage import Directory, local_path_of

SIZE_SAMPLE = 32  # bucket objects sized by ranged reads when the listing does not give sizes
BYTES_PER_TOKEN = 4.0  # a byte-level BPE on web text (Llama 3's: about 4.2 on English); code is denser
MEASURED_RATE = 357_000.0  # tokens/s per worker: benchmarks/RESULTS.md, `build_store`, per worker of 2
ENCODING_BYTES_PER_CHARACTER = 60  # tokenizers' encodings of a batch, per character (59 measured: stdlib)
DOCUMENT_TOKENS = 1_000  # tokens per document assumed for the offsets' objects


@dataclass(frozen=True)
class BuildEstimate:
    """What a build would do: inputs, units, workers, objects written, memory and time; all estimates but
    the counts of files and (for local inputs) their bytes."""

    files: int
    input_bytes: int
    sizes_estimated: bool  # bucket objects: sizes from a sample
    units: int
    unit_bytes: int
    largest_unit_bytes: int
    workers: int
    where: str
    tokens: int
    objects: int
    worker_memory_bytes: int
    seconds: float
    rate: float
    bytes_per_token: float

    def describe(self) -> list[str]:
        """The plan in lines, as `build --dry-run` prints it."""
        about = "about " if self.sizes_estimated else ""
        hours = self.seconds / 3600
        return [
            f"inputs: {self.files:,} files, {about}{human(self.input_bytes)}B"
            + (
                f" (sizes of a sample of {SIZE_SAMPLE} objects, spread over the listing)"
                if self.sizes_estimated
                else ""
            ),
            f"units: {self.units:,} of about {human(self.unit_bytes)}B of input each (largest "
            f"{human(self.largest_unit_bytes)}B)",
            f"workers: {self.workers:,} ({self.where})",
            f"tokens: about {human(self.tokens)} (at {self.bytes_per_token:g} bytes per token)",
            f"objects written: about {self.objects:,} (parts, their markers and the arrays' shards)",
            f"peak memory per worker: about {human(self.worker_memory_bytes)}B",
            f"expected wall time: {self.seconds:,.0f} s ({hours:.2f} h) at {human(self.rate)} tokens/s per "
            f"worker ({self.workers:,} workers, the tokenizing; the assembly adds a pass over the tokens)",
        ]


def object_size(url: str) -> int:
    """A bucket object's size from ranged one-byte reads (a listing through TensorStore gives only names):
    about 2·log2(size) requests."""
    from meltemi.datastore.storage.directory import parent_and_key

    directory, key = parent_and_key(url)
    kvstore = directory.kvstore

    def holds(offset: int) -> bool:
        try:
            found = kvstore.read(key, byte_range=slice(offset, offset + 1)).result()
        except ValueError as error:
            if str(error).startswith("OUT_OF_RANGE"):
                return False
            raise InputError(f"{redact(url)}: cannot be sized ({redact(str(error))})") from None
        if found.state != "value":
            raise InputError(f"{redact(url)}: no such object")
        return len(found.value) == 1

    if not holds(0):
        return 0
    high = 1
    while holds(high):
        high *= 2
    low = high // 2  # holds(low), not holds(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if holds(middle) else (low, middle)
    return high


def input_sizes(urls: Sequence[str]) -> tuple[list[int], bool]:
    """Each input's size, and whether some were estimated (bucket objects beyond a sample)."""
    local = [local_path_of(url) for url in urls]
    sizes: list[int | None] = [path.stat().st_size if path is not None else None for path in local]
    unknown = [i for i, size in enumerate(sizes) if size is None]
    if not unknown:
        return [int(size) for size in sizes], False  # type: ignore[arg-type]
    if not all(_in_bucket(urls[i]) for i in unknown):
        import fsspec

        for i in unknown:
            sizes[i] = int(fsspec.core.url_to_fs(urls[i])[0].size(urls[i]))
        return [int(size) for size in sizes], False  # type: ignore[arg-type]
    step = max(1, len(unknown) // SIZE_SAMPLE)
    sample = unknown[::step][:SIZE_SAMPLE]
    with ThreadPoolExecutor(min(16, len(sample))) as pool:
        measured = dict(zip(sample, pool.map(lambda i: object_size(urls[i]), sample), strict=True))
    mean = sum(measured.values()) / len(measured)
    estimated = len(measured) < len(unknown)
    return [
        int(measured.get(i, mean)) if size is None else int(size) for i, size in enumerate(sizes)
    ], estimated


def estimate_build(
    urls: Sequence[str],
    *,
    unit_bytes: int,
    workers: int,
    rate: float = MEASURED_RATE,
    where: str = "",
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    shard_tokens: int | None = None,
    bytes_per_token: float = BYTES_PER_TOKEN,
    chat: bool = False,
) -> BuildEstimate:
    """The estimate for building `urls`, as `build_store` would plan them, with `workers` at `rate` tokens/s
    each; nothing is read but the listing (and a sample of bucket objects' sizes)."""
    sizes, estimated = input_sizes(urls)
    total = sum(sizes)
    target = min(unit_bytes, max(MIN_UNIT_BYTES, total // UNITS_PER_CORPUS))
    units, size, largest = 0, 0, 0
    for url, file_size in zip(urls, sizes, strict=True):
        split = cut_at_lines(url) and file_size > unit_bytes
        for piece in (
            [unit_bytes] * (file_size // unit_bytes) + [file_size % unit_bytes] if split else [file_size]
        ):
            size += piece
            if size >= target:
                units, largest, size = units + 1, max(largest, size), 0
    if size:
        units, largest = units + 1, max(largest, size)
    tokens = int(total / bytes_per_token)
    shard = default_shard_tokens(chunk_tokens) if shard_tokens is None else shard_tokens
    arrays = 2 if chat else 1
    shards = arrays * math.ceil(tokens / shard) + math.ceil(tokens / DOCUMENT_TOKENS / OFFSETS_SHARD)
    objects = units * (5 if chat else 4) + shards + 8  # parts and markers; shards; metadata, plan, lease
    unit_memory = min(largest, BATCH_CHARACTERS) * ENCODING_BYTES_PER_CHARACTER + 3 * largest
    assembly_memory = 4 * shard * 8 + 2 * largest  # a shard's values and its slices, the parts it reads
    seconds = tokens / max(rate * max(workers, 1), 1e-9)
    return BuildEstimate(
        len(urls),
        total,
        estimated,
        units,
        total // max(units, 1),
        largest,
        workers,
        where or f"{workers} local processes",
        tokens,
        objects,
        max(unit_memory, assembly_memory),
        seconds,
        rate,
        bytes_per_token,
    )


def plan_build(
    request: BuildRequest,
    *,
    nodes: int | None = None,
    cores_per_node: int | None = None,
    rate: float = MEASURED_RATE,
    bytes_per_token: float = BYTES_PER_TOKEN,
) -> list[str]:
    """`build --dry-run`: what building `request` would do, in lines, from the listing of its inputs and
    what its output holds; the workers are `nodes` × `cores_per_node` when given, else the cluster's CPUs
    (`request.cluster`), else `request.workers`. Nothing is written and nothing tokenized."""
    chosen = resolve_data_inputs(
        list(request.inputs), request.split, request.subset, chat=request.format == "chat"
    )
    if nodes is not None or cores_per_node is not None:
        workers = (nodes or 1) * (cores_per_node or 1)
        where = f"{nodes or 1} node{'s' * ((nodes or 1) != 1)} of {cores_per_node or 1} cores"
    elif request.cluster is not None:
        from meltemi.datastore.build.ray_cluster import RayCluster  # the [ray] extra, only when asked for

        workers, where = (
            RayCluster(request.cluster).connected_workers(),
            f"the Ray cluster at {request.cluster}",
        )
    else:
        workers, where = request.workers, f"{request.workers} local process{'es' * (request.workers != 1)}"
    estimate = estimate_build(
        chosen.files,
        unit_bytes=request.unit_bytes,
        workers=workers,
        rate=rate,
        where=where,
        chunk_tokens=request.chunk_tokens,
        shard_tokens=request.shard_tokens,
        bytes_per_token=bytes_per_token,
        chat=request.format == "chat",
    )
    return [f"output: {request.out} ({_output_state(Directory(request.out))})", *estimate.describe()]


def _output_state(out: Directory) -> str:
    """What the output holds now: a store, a build stopped part of the way, or nothing."""
    if out.exists(MANIFEST):
        return "a store is built there; a build would check its inputs and do nothing if they are the same"
    plan = out.read_json(PLAN_KEY)
    if plan is not None:
        done = [key for key in out.list(f"{BUILD_DIR}/parts/") if key.endswith(".json")]
        return f"a build stopped there after {len(done)} of {len(plan['units'])} units; a build resumes it"
    return "empty: a new store"
