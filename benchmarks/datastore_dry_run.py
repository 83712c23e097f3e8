"""How long `build --dry-run` takes to plan a corpus the size of DCLM's listing: many files, terabytes.

The listing is synthetic: `--files` sparse JSONL files of about `--megabytes` each (nothing on disk but their
sizes), in directories of 1,000 as DCLM's global shards are. The dry run lists them, sizes them from the
listing and plans the units, workers, objects, memory and time for `--nodes` of `--cores` workers, reading
no input; it runs as the command a user types, in a fresh process, and its wall time includes Python's
start. The reference is the same process doing nothing but importing the datastore.

    uv run python benchmarks/datastore_dry_run.py [--files 30000 --megabytes 100 --nodes 64 --cores 64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=30_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--cores", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "dclm"
        for i in range(args.files):
            shard = corpus / f"global-shard_{i // 1000:02d}" / f"shard_{i:08d}.jsonl"
            shard.parent.mkdir(parents=True, exist_ok=True)
            with open(shard, "wb") as f:
                f.truncate(args.megabytes * 1_000_000 + i)
        from meltemi.datastore import corpora

        tokenizer = corpora.train_tokenizer(corpora.python_stdlib()[:20], 300, Path(scratch) / "t.json")
        command = [sys.executable, "-m", "meltemi.datastore", "build", "--input", str(corpus)]
        command += ["--tokenizer", str(tokenizer), "--out", f"{scratch}/store", "--dry-run"]
        command += ["--nodes", str(args.nodes), "--cores-per-node", str(args.cores)]
        start = time.perf_counter()
        planned = subprocess.run(command, capture_output=True, text=True, check=True)
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import meltemi.datastore.cli"], check=True)
        importing = time.perf_counter() - start
    print(planned.stdout.rstrip())
    alone = f"importing the datastore alone: {importing:.2f} s"
    print(f"dry run: {seconds:.2f} s for {args.files:,} files ({alone})")


if __name__ == "__main__":
    main()
