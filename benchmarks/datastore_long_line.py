"""Peak memory of building a store from one long single-line document, against tokenizing it whole.

The document is the standard library's source joined into one JSON line (escaped newlines), 19 million
characters by default. Each side runs in a fresh process that reports its own peak resident memory: the
store build (which tokenizes the document in pieces, `long_documents.pieces_of`), and the reference, one
`tokenizer.encode` of the whole text (what a build did before). Both must give the same ids.

    uv run python benchmarks/datastore_long_line.py [--megabytes 19]
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(document: str, tokenizer: str, out: str) -> None:
    from meltemi.datastore import TokenStore, build_store

    start = time.perf_counter()
    build_store(document, tokenizer, out, eos=False, progress=False)
    seconds = time.perf_counter() - start
    ids = TokenStore.open(out).doc(0)
    np.save(out + ".npy", ids)
    print(json.dumps({"peak_mb": peak_mb(), "seconds": seconds, "tokens": int(ids.size)}))


def whole(document: str, tokenizer: str, out: str) -> None:
    from tokenizers import Tokenizer

    text = json.loads(Path(document).read_text(encoding="utf-8"))["text"]
    start = time.perf_counter()
    ids = np.array(Tokenizer.from_file(tokenizer).encode(text, add_special_tokens=False).ids)
    seconds = time.perf_counter() - start
    np.save(out + ".npy", ids)
    print(json.dumps({"peak_mb": peak_mb(), "seconds": seconds, "tokens": int(ids.size)}))


def measure(side: str, document: Path, tokenizer: str, out: Path) -> dict:
    command = [sys.executable, __file__, "--side", side, str(document), tokenizer, str(out)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main(megabytes: float) -> None:
    from meltemi.datastore import corpora

    root = Path(tempfile.mkdtemp())
    files = corpora.python_stdlib()
    tokenizer = corpora.train_tokenizer(files[:200], 8192, root / "tokenizer.json")
    text, size, limit = [], 0, int(megabytes * 1e6)
    for path in itertools.cycle(files):  # the library again from its start when it is shorter
        text.append(Path(path).read_text(encoding="utf-8", errors="replace"))
        size += len(text[-1])
        if size >= limit:
            break
    document = root / "one-line.jsonl"
    document.write_text(json.dumps({"text": "".join(text)[:limit]}) + "\n", encoding="utf-8")
    print(f"document: {limit:,} characters, one JSON line of {document.stat().st_size / 1e6:.1f} MB")
    built = measure("build", document, tokenizer, root / "store")
    reference = measure("whole", document, tokenizer, root / "whole")
    same = np.array_equal(np.load(root / "store.npy"), np.load(root / "whole.npy"))
    print(f"store build:    peak {built['peak_mb']:,.0f} MB, {built['seconds']:.1f} s, ", end="")
    print(f"{built['tokens']:,} tokens")
    print(f"whole encoding: peak {reference['peak_mb']:,.0f} MB, {reference['seconds']:.1f} s")
    print(f"same ids: {same}")
    print(f"ratio (peak memory, build / whole encoding): {built['peak_mb'] / reference['peak_mb']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=19.0, help="millions of characters")
    parser.add_argument("--side", choices=("build", "whole"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        {"build": build, "whole": whole}[args.side](*args.paths)
    else:
        main(args.megabytes)
