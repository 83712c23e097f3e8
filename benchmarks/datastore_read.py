"""Shuffled `batch(step)` throughput against a numpy memmap of a flat file, measured in the same run.

A store of synthetic documents (a word-level vocabulary of 32,000, so building is quick) is read as a
256-row batch of 4096-token sequences, shuffled over the store, through `BatchLoader`: whole 1,024-token
chunks read (adjacent ones as one range), each chunk's CRC-32C checked, and segment ids computed from
the document boundaries read alongside. It is read as a local directory (positional reads), with
checksums verified and off, and by `file://` URL (TensorStore's key-value store, every range issued in
one batch). The reference copies the same 256 token ranges out of a numpy memmap of the same tokens in
one flat file, after the same shuffle, and computes no segment ids. Both read from the page cache; each
figure is the fastest of 30 steps, the readers taking turns, so that other load on the machine
matters less and alike. Targets: >= 0.5
of memmap, and >= 1M tokens/s per process.

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

SEQ_LEN, ROWS, STEPS = 4096, 256, 30
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


def fastest(reads: dict[str, object], steps) -> dict[str, float]:
    """Seconds of the fastest read of each kind, the kinds taking turns at every step (after a warm-up)."""
    best = {}
    for read in reads.values():
        read(steps[0])
    for step in steps:
        for name, read in reads.items():
            start = time.perf_counter()
            read(step)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best


def main() -> None:
    root = Path(tempfile.mkdtemp())
    files, tokenizer = synthetic_corpus(root)
    build_store(files, tokenizer, root / "store", progress=False)
    store = TokenStore.open(root / "store")
    store.tokens[:].tofile(root / "tokens.bin")
    memmap = np.memmap(root / "tokens.bin", dtype=store.tokens[0:1].dtype, mode="r")
    sequences = SequenceDataset(store, SEQ_LEN)
    layout = store.manifest["tokens"]
    print(
        f"store: {store.num_tokens / 1e6:.1f}M tokens, {store.num_docs} docs, "
        f"chunks of {layout['chunk']} tokens in shards of {layout['shard']}"
    )
    print(f"batch: {ROWS} x {SEQ_LEN}, shuffled over {len(sequences)} sequences")
    rows = BatchLoader(ShuffledDataset(sequences, key=0), ROWS).rows

    def memmap_batch(step):
        starts = SEQ_LEN * epoch_permute(rows(step), len(sequences), key=0)
        batch = np.stack([memmap[s : s + SEQ_LEN + 1] for s in starts])
        return batch[:, :-1], batch[:, 1:]

    variants = {
        "local, checksums verified": (root / "store", True),
        "local, checksums off": (root / "store", False),
        "file:// URL via TensorStore, verified": ((root / "store").as_uri(), True),
    }
    reads = {"memmap": memmap_batch}
    for label, (location, verify) in variants.items():
        dataset = ShuffledDataset(SequenceDataset(TokenStore.open(location, verify=verify), SEQ_LEN), key=0)
        reads[label] = BatchLoader(dataset, ROWS).batch
    rates = {name: ROWS * SEQ_LEN / seconds for name, seconds in fastest(reads, range(STEPS)).items()}
    reference = rates.pop("memmap")
    print(f"{'memmap, same ranges:':51} {reference / 1e6:8.1f}M tokens/s")
    for label, rate in rates.items():
        print(f"batch(step), {label + ':':38} {rate / 1e6:8.1f}M tokens/s, {rate / reference:.2f} of memmap")


if __name__ == "__main__":
    main()
