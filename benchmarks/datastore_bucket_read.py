"""Shuffled `batch(step)` throughput from a store in an S3 bucket against the same store on local disk.

The store (synthetic documents over a word-level vocabulary, as in `datastore_read.py`, 2M tokens by
default) is built once locally and once straight into a bucket of moto's S3 server on 127.0.0.1 (started
here, in this process), and the two builds are checked to be the same objects. Both are then read as
256-row batches of 4096-token sequences, shuffled over the store, through `BatchLoader`, checksums
verified: the local one with positional reads, the bucket one through TensorStore's s3 kvstore, every
range of a batch issued at once. Each figure is the fastest of the steps, the readers taking turns.

A loopback server in Python (moto) is far slower than S3 itself or a local disk, so the ratio is a floor
for this reader's overhead over HTTP, not S3's speed: it shows that a batch is a few concurrent ranged
GETs, not one GET per chunk. No target yet; the figure is recorded in RESULTS.md.

    uv run python benchmarks/datastore_bucket_read.py [--tokens N] [--steps N]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

import datastore_read
from datastore_read import ROWS, SEQ_LEN, fastest

from meltemi.datastore import BatchLoader, SequenceDataset, ShuffledDataset, TokenStore, build_store
from meltemi.datastore.storage import Directory
from meltemi.datastore.testing import start_s3_server


def main(tokens: int, steps: int) -> None:
    root = Path(tempfile.mkdtemp())
    datastore_read.TOKENS = tokens
    files, tokenizer = datastore_read.synthetic_corpus(root)
    server = start_s3_server()
    os.environ.update(server.environ)
    url = f"s3://{server.make_bucket()}/stores/synthetic"
    started = time.perf_counter()
    build_store(files, tokenizer, root / "store", progress=False)
    local_seconds = time.perf_counter() - started
    started = time.perf_counter()
    build_store(files, tokenizer, url, progress=False)
    bucket_seconds = time.perf_counter() - started
    local_dir, bucket = Directory(root / "store"), Directory(url)
    assert local_dir.list() == bucket.list(), "the two builds hold different objects"
    assert all(local_dir.read_bytes(k) == bucket.read_bytes(k) for k in local_dir.list()), "different bytes"
    store = TokenStore.open(root / "store")
    print(f"store: {store.num_tokens / 1e6:.1f}M tokens, {store.num_docs} docs; {server.endpoint} (moto)")
    print(
        f"build: local {local_seconds:.1f}s, into the bucket {bucket_seconds:.1f}s (same objects, same bytes)"
    )
    reads = {}
    for label, location in (("local directory", root / "store"), ("s3:// bucket", url)):
        dataset = ShuffledDataset(SequenceDataset(TokenStore.open(location), SEQ_LEN), key=0)
        reads[label] = BatchLoader(dataset, ROWS).batch
    rates = {name: ROWS * SEQ_LEN / seconds for name, seconds in fastest(reads, range(steps)).items()}
    local = rates["local directory"]
    for label, rate in rates.items():
        shown = f"{rate / 1e6:8.2f}M tokens/s, {rate / local:.3f} of local"
        print(f"batch(step) {ROWS}x{SEQ_LEN}, {label + ':':18} {shown}")
    server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2_000_000)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    main(args.tokens, args.steps)
