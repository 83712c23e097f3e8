"""Opening a store of 12 trillion tokens: the objects and bytes it reads, its peak memory and time, and
what a random batch then reads, against what the batch needs.

The store is synthetic (`datastore.synthetic`), format 3: 3,000,000,000 documents of 4,000 tokens each
(12,000,000,000,000 tokens, uint32 for a vocabulary of 128,256). What opening reads is real: the manifest,
the group's and each array's `zarr.json` (through `layout.create_array`), and `offsets_index`, its
2,929,688 values (every 1,024th offset of the arithmetic progression) in one shard written by the build's
own `ArrayWriter`. The shards of `tokens` and `offsets` (11.4 million and 22,889 of them, 48 TB) are
virtual: only those the batch touches are written, through TensorStore, with the values the progression
gives. That was chosen over a `StoreFiles` that makes shards up as they are read, so that what is read is
TensorStore's own files, through the store's own `LocalFiles`, as a real store is; and a read of any
other shard would fail naming it, so the batch's success shows it reads none.

Opening runs in a fresh process that reports its resident memory before and its peak during (Linux's
`VmRSS`, and `VmHWM` reset just before through `/proc/self/clear_refs`), reading through a `CountingFiles`:
objects, requests and bytes; the time is the first open's and the fastest of `--opens` more (the files in
the page cache). The batch is 8 windows of 4,096 tokens at random positions, read by
`TokenStore.read_windows` (tokens, and where documents start in them, checked against the progression),
its chunk reads counted against the chunks the progression says it needs. Targets: opening reads the same
5 objects whatever the size, and raises peak memory by less than 50 MB.

    uv run python benchmarks/datastore_open_huge.py [--documents 3000000000] [--tokens-per-document 4000]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from meltemi.datastore.layout import OFFSETS, OFFSETS_CHUNK, OFFSETS_INDEX, OFFSETS_SHARD, TOKENS, ShardLayout
from meltemi.datastore.synthetic import SyntheticStore

ROWS, LENGTH = 8, 4096


def memory_mb() -> dict[str, float]:
    """Resident memory now and at its peak (Linux's `VmRSS` and `VmHWM`), in MB."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(status[field].split()[0]) / 1024 for key, field in (("now", "VmRSS"), ("peak", "VmHWM"))}


def reset_peak() -> None:
    """Set the peak resident memory to what is resident now (Linux 4.0 on), so a peak measured after is
    what the work in between reached."""
    Path("/proc/self/clear_refs").write_text("5")


def measure(root: str, documents: int, per_document: int, starts: list[int], opens: int) -> None:
    """In a fresh process: open the store (memory, reads, time), then read the batch; print JSON."""
    from meltemi.datastore import TokenStore
    from meltemi.datastore.files import CountingFiles, LocalFiles

    synthetic = SyntheticStore(root, documents, per_document)
    files = CountingFiles(LocalFiles(Path(root)))
    reset_peak()
    before = memory_mb()
    start = time.perf_counter()
    store = TokenStore.open(root, files=files)
    first = time.perf_counter() - start
    after = memory_mb()
    opened = {
        "before_mb": before["now"],
        "peak_mb": after["peak"],
        "after_mb": after["now"],
        "first_s": first,
    }
    opened |= {"requests": dict(files.requests), "bytes": dict(files.bytes)}
    times = []
    for _ in range(opens):
        start = time.perf_counter()
        TokenStore.open(root)
        times.append(time.perf_counter() - start)
    files.reset()
    start = time.perf_counter()
    windows = store.read_windows(np.array(starts), LENGTH)
    batch_s = time.perf_counter() - start
    for row, first_token in enumerate(starts):
        assert np.array_equal(windows.tokens[row], synthetic.token_values(first_token, first_token + LENGTH))
        begins = np.arange(first_token // per_document + 1, (first_token + LENGTH - 1) // per_document + 1)
        assert (
            windows.boundary_positions[windows.boundary_rows == row].tolist()
            == (begins * per_document - first_token).tolist()
        )
    print(
        json.dumps(
            opened
            | {"fastest_s": min(times), "batch_s": batch_s}
            | {"batch_requests": dict(files.requests), "batch_bytes": dict(files.bytes)}
        )
    )


def per_array(counts: dict[str, int], name: str) -> int:
    return sum(n for key, n in counts.items() if key.startswith(f"{name}/"))


def main(documents: int, per_document: int, opens: int, seed: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run(Path(folder) / "store", documents, per_document, opens, seed)


def run(root: Path, documents: int, per_document: int, opens: int, seed: int) -> None:
    synthetic = SyntheticStore(root, documents, per_document)
    layouts = synthetic.layouts()
    start = time.perf_counter()
    synthetic.create()
    starts = np.random.default_rng(seed).integers(0, synthetic.tokens - LENGTH, ROWS)
    needed = synthetic.window_chunks(starts, LENGTH)
    for name in (TOKENS, OFFSETS):
        synthetic.write_shards(name, needed[name] // layouts[name].chunks_per_shard)
    made = time.perf_counter() - start
    index = layouts[OFFSETS_INDEX]
    old_index = ShardLayout(index.size, index.dtype, OFFSETS_CHUNK, OFFSETS_SHARD)
    print(
        f"store: {documents:,} documents of {per_document:,} tokens, {synthetic.tokens:,} tokens "
        f"({layouts[TOKENS].dtype}); {layouts[TOKENS].num_shards:,} token shards and "
        f"{layouts[OFFSETS].num_shards:,} offsets shards, virtual; offsets_index {index.size:,} values in "
        f"{index.num_shards} shard ({index.shard_file_size(0) / 1e6:.1f} MB; format 2 laid it out in "
        f"{old_index.num_shards} shards); made in {made:.1f} s"
    )
    command = [sys.executable, __file__, "--measure", str(root), "--documents", str(documents)]
    command += ["--tokens-per-document", str(per_document), "--opens", str(opens)]
    command += ["--starts", ",".join(map(str, starts.tolist()))]
    figures = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    requests, read = figures["requests"], figures["bytes"]
    print(
        f"open: {len(requests)} objects ({', '.join(requests)}), {sum(requests.values())} requests, "
        f"{sum(read.values()) / 1e6:.1f} MB read"
    )
    increase, held = (figures[key] - figures["before_mb"] for key in ("peak_mb", "after_mb"))
    print(
        f"open: resident memory {figures['before_mb']:.1f} MB before, peak {figures['peak_mb']:.1f} MB: "
        f"+{increase:.1f} MB (target < 50 MB: {'met' if increase < 50 else 'NOT met'}); "
        f"+{held:.1f} MB held after"
    )
    first, fastest, batch = (figures[key] * 1e3 for key in ("first_s", "fastest_s", "batch_s"))
    print(f"open: {first:.1f} ms the first time, {fastest:.1f} ms the fastest of {opens}")
    print(f"batch: {ROWS} windows of {LENGTH} tokens at random positions, read in {batch:.1f} ms")
    batch_requests, batch_bytes = figures["batch_requests"], figures["batch_bytes"]
    for name in (TOKENS, OFFSETS):
        chunks = per_array(batch_bytes, name) / layouts[name].chunk_bytes
        print(
            f"batch, {name}: {chunks:.0f} chunks read in {per_array(batch_requests, name)} requests from "
            f"{sum(key.startswith(name + '/') for key in batch_requests)} shards; {len(needed[name])} needed "
            f"(read / needed {chunks / len(needed[name]):.2f})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=3_000_000_000)
    parser.add_argument("--tokens-per-document", type=int, default=4000)
    parser.add_argument("--opens", type=int, default=5, help="opens timed after the first (fastest shown)")
    parser.add_argument("--seed", type=int, default=0, help="of the batch's random positions")
    parser.add_argument("--measure", metavar="STORE", help=argparse.SUPPRESS)
    parser.add_argument("--starts", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        starts = [int(s) for s in args.starts.split(",")]
        measure(args.measure, args.documents, args.tokens_per_document, starts, args.opens)
    else:
        main(args.documents, args.tokens_per_document, args.opens, args.seed)
