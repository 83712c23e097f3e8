"""Build throughput against tokenizers' own `encode_batch` on the same text, measured in the same run.

Prints tokens/s for `encode_batch` over all the documents (both with its own thread pool and with one
thread), for `build_store` with 1 worker (in process, the tokenizer's thread pool) and with 2 worker
processes (one tokenizer thread each), and the ratios: the pipeline's tokens/s per worker over the
reference's. Target: >= 0.8. Corpus: the first 150 files of the running interpreter's standard library.

    uv run python benchmarks/datastore_build.py
"""

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


def timed(function, repeats: int = 2):
    """The result of `function` and the fastest of `repeats` runs: other load on the machine matters less."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - start)
    return result, min(seconds)


def main() -> None:
    tmp = tempfile.mkdtemp()
    files = corpora.python_stdlib()[:150]
    tokenizer_path = corpora.train_tokenizer(files[:100], 4096, f"{tmp}/tokenizer.json")
    texts = [t for t in (open(f, "rb").read().decode("utf-8", "replace") for f in files) if t.strip()]
    tokenizer = Tokenizer.from_file(tokenizer_path)
    print(f"corpus: {len(files)} files, {sum(map(len, texts)) / 1e6:.1f}M characters, cpus: {os.cpu_count()}")

    tokens, seconds = timed(lambda: encode_all(tokenizer, texts))
    reference_parallel = tokens / seconds
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _, seconds = timed(lambda: encode_all(tokenizer, texts))
    reference_single = tokens / seconds
    del os.environ["TOKENIZERS_PARALLELISM"]
    print(f"encode_batch (own thread pool):   {reference_parallel / 1e6:.3f}M tokens/s")
    print(f"encode_batch (one thread):        {reference_single / 1e6:.3f}M tokens/s")

    def build(name: str, workers: int):
        runs = iter(range(2))
        return timed(
            lambda: build_store(
                files, tokenizer_path, f"{tmp}/{name}{next(runs)}", workers=workers, progress=False
            )
        )

    report, seconds = build("one", 1)
    assert report.tokens == tokens, (report.tokens, tokens)
    one = report.tokens / seconds
    print(f"build_store, 1 worker (in process): {one / 1e6:.3f}M tokens/s ({seconds:.2f}s, all included)")
    report, seconds = build("two", 2)
    two = report.tokens / seconds / 2
    print(f"build_store, 2 workers:             {two / 1e6:.3f}M tokens/s per worker ({seconds:.2f}s)")
    print(
        f"ratio, 1 worker / encode_batch (own thread pool):   {one / reference_parallel:.2f}  (target >= 0.8)"
    )
    print(
        f"ratio, per worker of 2 / encode_batch (one thread): {two / reference_single:.2f}  (target >= 0.8)"
    )


if __name__ == "__main__":
    main()
