"""A build on a Ray cluster against `tokenizers`' own `encode_batch` on one core, and against today's one-host
build with as many worker processes, measured in the same run.

Starts a real Ray cluster on this machine (`datastore.testing.LocalRayCluster`: a head without CPUs and
`--nodes` worker nodes of one CPU each, every node its own raylet on loopback) and builds the first `--files`
files of the running interpreter's standard library into a local directory (a disk every node shares), with
`build_store(cluster=...)`. Prints tokens/s for `encode_batch` over all the documents on one thread, for the
cluster build (per worker: its tokens/s over `--nodes`) and for `build_store(workers=N)` (N local
processes), and the ratios: the cluster's per-worker tokens/s over `encode_batch`'s (target >= 0.8), and the
cluster build's tokens/s over the one-host build's (target >= 0.9). Both builds fingerprint, tokenize,
assemble and hash the same store; the sides alternate over `--rounds` rounds and the fastest of each counts.
Then, on paper, the nodes of `--cores` cores that tokenize `--corpus-tokens` tokens in `--hours` hours at the
measured per-worker rate (default: DCLM's 3.8T tokens in 12 hours on 64-core nodes).

    uv run python benchmarks/datastore_cluster_build.py [--nodes 2] [--files 600] [--rounds 3]
"""

import argparse
import math
import os
import tempfile
import time

from tokenizers import Tokenizer

from meltemi.datastore import build_store, corpora
from meltemi.datastore.testing import LocalRayCluster


def encode_all(tokenizer: Tokenizer, texts: list[str]) -> int:
    """Tokens of every text and an EOS each, 512 texts per `encode_batch` call (as the build batches)."""
    total = 0
    for start in range(0, len(texts), 512):
        batch = tokenizer.encode_batch(texts[start : start + 512], add_special_tokens=False)
        total += sum(len(encoding.ids) + 1 for encoding in batch)
    return total


def encode_on_one_thread(tokenizer: Tokenizer, texts: list[str]) -> int:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        return encode_all(tokenizer, texts)
    finally:
        del os.environ["TOKENIZERS_PARALLELISM"]


def seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(args: argparse.Namespace) -> None:
    tmp = tempfile.mkdtemp()
    files = corpora.python_stdlib()[: args.files]
    tokenizer_path = corpora.train_tokenizer(files, 4096, f"{tmp}/tokenizer.json")
    texts = [t for t in (open(f, "rb").read().decode("utf-8", "replace") for f in files) if t.strip()]
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokens = encode_all(tokenizer, texts)
    print(f"corpus: {len(files)} files, {sum(map(len, texts)) / 1e6:.1f}M characters, {tokens:,} tokens")
    nodes_of = f"{args.nodes} node{'s' * (args.nodes != 1)} of 1 CPU"
    print(f"cpus: {os.cpu_count()}; a local Ray cluster of {nodes_of}; the fastest of {args.rounds} rounds")

    with LocalRayCluster(workers=args.nodes) as cluster:
        reports = {}

        def build(side: str, run: int) -> None:
            where = {"cluster": cluster.address} if side == "cluster" else {"workers": args.nodes}
            report = build_store(files, tokenizer_path, f"{tmp}/{side}-{run}", progress=False, **where)
            assert report.tokens == tokens, (report.tokens, tokens)
            reports[side] = report

        times: dict[str, list[float]] = {"encode": [], "cluster": [], "local": []}
        for run in range(args.rounds):
            times["encode"].append(seconds(lambda: encode_on_one_thread(tokenizer, texts)))
            times["cluster"].append(seconds(lambda run=run: build("cluster", run)))
            times["local"].append(seconds(lambda run=run: build("local", run)))
        cluster_report = reports["cluster"]
    rate = {side: tokens / min(taken) for side, taken in times.items()}
    per_worker = rate["cluster"] / args.nodes
    ran = cluster_report.nodes
    print(f"encode_batch, one thread:  {rate['encode'] / 1e6:.3f}M tokens/s")
    print(
        f"build on the cluster:      {rate['cluster'] / 1e6:.3f}M tokens/s, {per_worker / 1e6:.3f}M per "
        f"worker ({ran} node{'s' * (ran != 1)} ran tasks, {cluster_report.repeated_units} units twice)"
    )
    alone = " (this process: the tokenizer's own thread pool, on every core)" if args.nodes == 1 else ""
    print(f"{f'build here, workers={args.nodes}:':27}{rate['local'] / 1e6:.3f}M tokens/s{alone}")
    print(
        "seconds per round (encode, cluster, local): "
        + "; ".join(f"{e:.2f}, {c:.2f}, {lo:.2f}" for e, c, lo in zip(*times.values(), strict=True))
    )
    print(
        f"ratio, per worker on the cluster / encode_batch on one thread: {per_worker / rate['encode']:.2f} "
        "(target >= 0.8)"
    )
    print(
        f"ratio, cluster build / one-host build (workers={args.nodes}):        "
        f"{rate['cluster'] / rate['local']:.2f} (target >= 0.9)"
    )
    needed = args.corpus_tokens / (args.hours * 3600)
    nodes = needed / (args.cores * per_worker)
    print(
        f"on paper: {args.corpus_tokens / 1e12:g}T tokens in {args.hours:g} h is "
        f"{needed / 1e6:.1f}M tokens/s; at {per_worker / 1e6:.3f}M tokens/s per core, "
        f"{args.cores}-core nodes: {nodes:.1f}, so "
        f"{math.ceil(nodes)} (tokenizing only: reading, decompressing and writing the bucket not counted)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes of 1 CPU in the local cluster")
    parser.add_argument("--files", type=int, default=600, help="standard-library files in the corpus")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the fastest counts")
    parser.add_argument("--corpus-tokens", type=float, default=3.8e12, help="the corpus on paper (DCLM)")
    parser.add_argument("--hours", type=float, default=12.0, help="the time on paper to tokenize it in")
    parser.add_argument("--cores", type=int, default=64, help="cores per node on paper")
    arguments = parser.parse_args()
    if min(arguments.nodes, arguments.files, arguments.rounds, arguments.cores) < 1:
        parser.error("--nodes, --files, --rounds and --cores must be at least 1")
    main(arguments)
