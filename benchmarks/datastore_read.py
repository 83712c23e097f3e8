"""Shuffled `batch(step)` throughput against a numpy memmap of a flat file, measured in the same run.

A store of synthetic documents (a word-level vocabulary of 32,000, so building is quick) is read as a
256-row batch of 4096-token sequences, shuffled over the store, through `BatchLoader`: chunks coalesced,
read asynchronously through TensorStore, checksums verified (and again with them off). The reference
copies the same 256 token ranges out of a numpy memmap of the same tokens in one flat file, after the
same shuffle. Both read from the page cache; each figure is the fastest of several steps, so that other
load on the machine matters less. Targets: >= 0.5 of memmap, and >= 1M tokens/s per process.

    uv run python benchmarks/datastore_read.py
"""

import json
import tempfile
import time
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

from meltemi.datastore import BatchLoader, SequenceDataset, ShuffledDataset, TokenStore, build_store
from meltemi.datastore.shuffle import epoch_permute

SEQ_LEN, ROWS, STEPS = 4096, 256, 10
VOCAB, TOKENS, FILES = 32_000, 8_000_000, 4


def synthetic_corpus(root: Path) -> tuple[list[str], str]:
    words = np.array([f"w{i}" for i in range(VOCAB - 1)])
    tokenizer = Tokenizer(
        models.WordLevel({w: i for i, w in enumerate(words)} | {"<|endoftext|>": VOCAB - 1}, "w0")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(root / "tokenizer.json"))
    rng = np.random.default_rng(0)
    files = []
    for f in range(FILES):
        lengths = rng.integers(50, 6000, size=TOKENS // FILES // 3000)
        ids = rng.integers(0, VOCAB - 1, size=lengths.sum())
        ends = np.cumsum(lengths)
        path = root / f"part{f}.jsonl"
        with open(path, "w") as out:
            for doc in np.split(ids, ends[:-1]):
                out.write(json.dumps({"text": " ".join(words[doc])}) + "\n")
        files.append(str(path))
    return files, str(root / "tokenizer.json")


def fastest(read, steps) -> float:
    """Seconds of the fastest of `steps` reads, after one warm-up read."""
    read(steps[0])
    times = []
    for step in steps:
        start = time.perf_counter()
        read(step)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    root = Path(tempfile.mkdtemp())
    files, tokenizer = synthetic_corpus(root)
    build_store(files, tokenizer, root / "store", progress=False)
    store = TokenStore.open(root / "store")
    store.tokens[:].tofile(root / "tokens.bin")
    memmap = np.memmap(root / "tokens.bin", dtype=store.tokens[0:1].dtype, mode="r")
    sequences = SequenceDataset(store, SEQ_LEN)
    chunk = store.manifest["tokens"]["chunk"]
    print(f"store: {store.num_tokens / 1e6:.1f}M tokens, {store.num_docs} docs, chunks of {chunk} tokens")
    print(f"batch: {ROWS} x {SEQ_LEN}, shuffled over {len(sequences)} sequences")
    rows = BatchLoader(ShuffledDataset(sequences, key=0), ROWS).rows

    def memmap_batch(step):
        starts = SEQ_LEN * epoch_permute(rows(step), len(sequences), key=0)
        batch = np.stack([memmap[s : s + SEQ_LEN + 1] for s in starts])
        return batch[:, :-1], batch[:, 1:]

    tokens_per_batch = ROWS * SEQ_LEN
    reference = tokens_per_batch / fastest(memmap_batch, range(STEPS))
    print(f"memmap, same ranges:              {reference / 1e6:8.1f}M tokens/s")
    for verify in (True, False):
        dataset = ShuffledDataset(
            SequenceDataset(TokenStore.open(root / "store", verify=verify), SEQ_LEN), key=0
        )
        rate = tokens_per_batch / fastest(BatchLoader(dataset, ROWS).batch, range(STEPS))
        label = "verified" if verify else "off     "
        print(
            f"batch(step), checksums {label}:  {rate / 1e6:8.1f}M tokens/s, {rate / reference:.2f} of memmap"
        )


if __name__ == "__main__":
    main()
