"""Tokens/s of the fine-tuning step against the pretraining step at the same shapes, and how full packing
fills the rows: on the shipped example and on a length distribution like tulu-3's.

One compiled train step of a config (default: configs/tiny_sft.yaml's model) runs, alternately in one
process, on three kinds of batch of the same shape: a pretraining batch as the step took it before batches
carried positions (text rows across documents; the rotary tables built from the row's length), the same
batch with its positions (what pretraining passes now), and a fine-tuning batch (whole conversations of
the standard library's chat corpus packed into rows: positions restarted, the loss on the assistant's
tokens only). Target: fine-tuning / pretraining >= 0.95 (masks and positions cost nothing).

    uv run python benchmarks/sft_step.py [--config configs/tiny_sft.yaml] [--rounds 3] [--steps 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

import haliax_lite as hax
from meltemi.datastore import (
    BatchLoader,
    MixtureDataset,
    SequenceDataset,
    TokenStore,
    build_store,
    corpora,
    pack_lengths,
)
from meltemi.datastore.chat.stdlib import stdlib_chat
from meltemi.datastore.packing import PackedDataset
from meltemi.trainer import adapters
from meltemi.trainer.config_io import load_config
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.train_step import make_train_step

TULU_MEDIAN, TULU_SIGMA = 550, 0.9  # conversation lengths in tokens: lognormal, as tulu-3's SFT mixture is


def tulu_like_fill(seq_len: int, count: int = 50_000, seed: int = 0) -> tuple[float, float, float]:
    """Fill of rows of ``seq_len + 1`` tokens for ``count`` lognormal conversation lengths (longer ones cut
    to a row): packed best fit decreasing, packed in arrival order (next fit), and one per row."""
    rng = np.random.default_rng(seed)
    width = seq_len + 1
    lengths = np.clip(np.round(rng.lognormal(np.log(TULU_MEDIAN), TULU_SIGMA, count)), 16, width).astype(int)
    best = pack_lengths(lengths, width).fill(lengths, width)
    rows, room = 1, width
    for length in lengths.tolist():  # next fit: a new row whenever the next conversation does not fit
        if length > room:
            rows, room = rows + 1, width
        room -= length
    return best, lengths.sum() / (rows * width), lengths.sum() / (len(lengths) * width)


def batches(config, root: Path) -> dict[str, dict[str, np.ndarray]]:
    """Three global batches of the config's shape: pretraining (with and without positions), fine-tuning."""
    rows, seq_len = config.trainer.batch_sizes()[0], config.data.seq_len
    files = corpora.python_stdlib()
    tokenizer = corpora.train_tokenizer(files[:200], config.model.vocab_size, root / "tokenizer.json")
    build_store(files[:300], tokenizer, root / "text", progress=False)
    chat = stdlib_chat(root / "chat.jsonl")
    build_store(chat, tokenizer, root / "chat", format="chat", max_tokens=seq_len + 1, progress=False)
    text = MixtureDataset(
        {"text": SequenceDataset(TokenStore.open(root / "text"), seq_len)}, {"text": 1}, 64, 0
    )
    packed = PackedDataset(TokenStore.open(root / "chat"), seq_len)
    print(f"fine-tuning rows: {packed.report()}")
    pretraining = BatchLoader(text, rows).batch(0)
    fine_tuning = BatchLoader(packed, rows).batch(0)
    print(
        f"trained targets per batch: pretraining {pretraining['loss_mask'].mean():.1%}, "
        f"fine-tuning {fine_tuning['loss_mask'].mean():.1%} (the assistant's tokens)"
    )
    return {"pretraining": pretraining, "fine-tuning": fine_tuning}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny_sft.yaml")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the three batches")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round and batch")
    args = parser.parse_args()
    config = load_config(args.config, ["--trainer.initialize_from", "null", "--data.sources", "{}"])
    for seq_len in (2048, 4096):
        best, next_fit, alone = tulu_like_fill(seq_len)
        print(
            f"tulu-3-like lengths at seq_len {seq_len}: fill {best:.1%} packed (best fit decreasing), "
            f"{next_fit:.1%} packed in order (next fit), {alone:.1%} one conversation per row"
        )
    host = batches(config, Path(tempfile.mkdtemp()))
    plan = MeshPlan.of(config, jax.devices()[:1])
    program = TrainProgram(config, plan)
    train_step = make_train_step(config, program.abstract_state().model)

    def in_mapping(state, batch):
        with hax.axis_mapping(plan.compute_mapping):
            return train_step(state, batch)

    step = jax.jit(in_mapping, donate_argnums=0)  # one program per batch structure (positions or None)
    named = {k: adapters.named_batch(adapters.batch_host_arrays(v)) for k, v in host.items()}
    kinds = {
        "pretraining, no positions": eqx.tree_at(lambda b: b.positions, named["pretraining"], None),
        "pretraining": named["pretraining"],
        "fine-tuning": named["fine-tuning"],
    }
    state = program.initial_state()
    with jax.set_mesh(plan.mesh):
        for batch in kinds.values():  # compile and warm each once
            state, metrics = step(state, batch)
            jax.block_until_ready(metrics)
        times: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(args.rounds):
            for name, batch in kinds.items():
                for _ in range(args.steps):
                    start = time.perf_counter()
                    state, metrics = step(state, batch)
                    jax.block_until_ready(metrics)
                    times[name].append(time.perf_counter() - start)
    rows = config.trainer.batch_sizes()[0]
    tokens = rows * config.data.seq_len
    rate = {name: tokens / statistics.median(t) for name, t in times.items()}
    for name, value in rate.items():
        print(f"{name:<26} {value:,.0f} tokens/s ({statistics.median(times[name]) * 1e3:.0f} ms/step)")
    print(
        f"pretraining with positions / without: {rate['pretraining'] / rate['pretraining, no positions']:.3f}"
    )
    print(f"ratio: {rate['fine-tuning'] / rate['pretraining, no positions']:.3f}")


if __name__ == "__main__":
    main()
