"""Build throughput against tokenizers' own `encode_batch` on the same text, measured in the same run.

Prints tokens/s for `encode_batch` over all the documents (both with its own thread pool and with one
thread), for `build_store` with 1 worker (in process, the tokenizer's thread pool) and with 2 worker
processes (one tokenizer thread each), and the ratios: the pipeline's tokens/s per worker over the
reference's. Target: >= 0.8. Corpus: the first 600 files of the running interpreter's standard library (about
3M tokens): on much less, starting the worker processes is most of what a 2-worker build measures.

    uv run python benchmarks/datastore_build.py [--files N] [--rounds N]
"""

import argparse
import os
import tempfile
import time

from tokenizers import Tokenizer

from meltemi.datastore import build_store, corpora


def encode_all(tokenizer: Tokenizer, texts: list[str]) -> int:
    total = 0
    for start in range(0, len(texts), 512):
        total += sum(
            len(e.ids) + 1
            for e in tokenizer.encode_batch(texts[start : start + 512], add_special_tokens=False)
        )
    return total


def seconds(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(num_files: int, rounds: int) -> None:
    tmp = tempfile.mkdtemp()
    files = corpora.python_stdlib()[:num_files]
    tokenizer_path = corpora.train_tokenizer(files, 4096, f"{tmp}/tokenizer.json")
    texts = [t for t in (open(f, "rb").read().decode("utf-8", "replace") for f in files) if t.strip()]
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokens = encode_all(tokenizer, texts)
    print(f"corpus: {len(files)} files, {sum(map(len, texts)) / 1e6:.1f}M characters, {tokens:,} tokens")
    print(f"cpus: {os.cpu_count()}; the two sides alternate, {rounds} rounds, the fastest of each counts")

    def build(workers: int, run: int) -> None:
        report = build_store(
            files, tokenizer_path, f"{tmp}/w{workers}-{run}", workers=workers, progress=False
        )
        assert report.tokens == tokens, (report.tokens, tokens)

    def encode_single_threaded() -> None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            encode_all(tokenizer, texts)
        finally:
            del os.environ["TOKENIZERS_PARALLELISM"]

    best = {"pool": [], "one": [], "single": [], "two": []}
    for run in range(rounds):
        best["pool"].append(seconds(lambda: encode_all(tokenizer, texts)))
        best["one"].append(seconds(lambda run=run: build(1, run)))
        best["single"].append(seconds(encode_single_threaded))
        best["two"].append(seconds(lambda run=run: build(2, run)))
    rate = {name: tokens / min(times) for name, times in best.items()}
    rate["two"] /= 2
    print(f"encode_batch (its own thread pool):   {rate['pool'] / 1e6:.3f}M tokens/s")
    print(
        f"build_store, 1 worker (in process):   {rate['one'] / 1e6:.3f}M tokens/s (hashing, writing included)"
    )
    print(f"encode_batch (one thread):            {rate['single'] / 1e6:.3f}M tokens/s")
    print(f"build_store, 2 worker processes:      {rate['two'] / 1e6:.3f}M tokens/s per worker")
    one, two = rate["one"] / rate["pool"], rate["two"] / rate["single"]
    print(f"ratio, 1 worker / encode_batch (thread pool):       {one:.2f} (target >= 0.8)")
    print(f"ratio, per worker of 2 / encode_batch (one thread): {two:.2f} (target >= 0.8)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=600, help="standard-library files in the corpus")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the fastest counts")
    args = parser.parse_args()
    if args.files < 1 or args.rounds < 1:
        parser.error(f"--files and --rounds must be at least 1, got {args.files} and {args.rounds}")
    main(args.files, args.rounds)
