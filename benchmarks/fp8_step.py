"""Tokens/s and loss after 100 steps with bf16 matmuls and with fp8 ones (``model.matmul_dtype``), the same
config (by default the 1B shape, ``configs/llama_1b.yaml``), start and batches, one run after the other on
one device. Meant for a GPU with fp8 matrix units (H100, H200); elsewhere fp8 is only emulated.

The batches are a synthetic language that a model can learn, so the loss says something after 100 steps
without a corpus or network: a fixed random Markov chain over the whole vocabulary in which each token is
followed by one of ``--successors`` tokens (its entropy, ``ln(successors)`` nats, is the floor), rows of
about four documents (segment ids), as the token store gives them. The batch is ``--rows`` sequences (16:
about 70 s per run on an H100 at the shipped 1B step's speed) rather than the config's 64, so both runs
fit one call of a few minutes.

    uv run python benchmarks/fp8_step.py                                       # on a GPU
    uv run python benchmarks/fp8_step.py --config configs/tiny.yaml --steps 20  # a smoke run on a CPU

The last line is ``ratio: <fp8 tokens/s / bf16 tokens/s>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time

import jax
import numpy as np

from meltemi.trainer import adapters
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import load_config
from meltemi.trainer.step.flops import flops_per_token, peak_flops_per_device
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.train_step import init_state, make_train_step


def markov_batch(config: RunConfig, rows: int, step: int, successors: int) -> dict[str, np.ndarray]:
    """Step ``step``'s batch of the chain (the same chain for every step and run: seeded by nothing else)."""
    vocab, length = config.model.vocab_size, config.data.seq_len
    table = np.random.default_rng(0).integers(0, vocab, (vocab, successors), dtype=np.int32)
    rng = np.random.default_rng(1 + step)
    tokens = np.empty((rows, length + 1), np.int32)
    tokens[:, 0] = rng.integers(0, vocab, rows)
    choices = rng.integers(0, successors, (rows, length))
    for i in range(length):
        tokens[:, i + 1] = table[tokens[:, i], choices[:, i]]
    segments = np.cumsum(rng.random((rows, length)) < 4 / length, axis=1).astype(np.int32)
    return {
        "input_ids": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "segment_ids": segments,
        "loss_mask": np.ones((rows, length), bool),
        "source": np.zeros(rows, np.int32),
    }


@dataclasses.dataclass(frozen=True)
class Run:
    """One run's figures: compile seconds, median seconds per step after the first 10, every step's loss."""

    compile_seconds: float
    step_seconds: float
    losses: list[float]


def train(config: RunConfig, batches: list[dict[str, np.ndarray]]) -> Run:
    """``len(batches)`` steps of ``config`` from its seed's start, each timed to its loss on the host."""
    plan = MeshPlan.of(config, jax.devices()[:1])
    with jax.set_mesh(plan.mesh):
        state = jax.jit(lambda k: init_state(config, k))(adapters.jax_key(config.trainer.seed, "init"))
        named = [adapters.named_batch(b) for b in batches]
        started = time.perf_counter()
        step = jax.jit(make_train_step(config), donate_argnums=0).lower(state, named[0]).compile()
        compile_seconds = time.perf_counter() - started
        times, losses = [], []
        for batch in named:
            started = time.perf_counter()
            state, metrics = step(state, batch)
            losses.append(float(metrics.loss))  # waits for the step
            times.append(time.perf_counter() - started)
    return Run(compile_seconds, statistics.median(times[10:] or times), losses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/llama_1b.yaml")
    parser.add_argument("--steps", type=int, default=100, help="train steps per run")
    parser.add_argument("--rows", type=int, default=16, help="sequences per step")
    parser.add_argument("--successors", type=int, default=16, help="the chain's choices per token")
    args, overrides = parser.parse_known_args()
    words = ["--trainer.mesh.data", "1", "--trainer.global_batch_size", str(args.rows)]
    words += ["--trainer.num_train_steps", str(args.steps), *overrides]
    base = load_config(args.config, words)
    batches = [markov_batch(base, args.rows, step, args.successors) for step in range(args.steps)]
    tokens = args.rows * base.data.seq_len
    peak = peak_flops_per_device()
    print(f"device: {jax.devices()[0].device_kind}; jax {jax.__version__}; config {args.config}")
    floor = math.log(args.successors)
    print(f"batch {args.rows} x {base.data.seq_len}; {args.steps} steps; loss floor {floor:.3f}")
    print("matmuls | compile s | tokens/s | MFU | loss, last 10 steps | loss at the last step")
    speeds = {}
    for matmul_dtype in ("compute", "fp8"):
        config = base.model_copy(
            update={"model": base.model.model_copy(update={"matmul_dtype": matmul_dtype})}
        )
        run = train(config, batches)
        speeds[matmul_dtype] = tokens / run.step_seconds
        flops = flops_per_token(config.model, config.data.seq_len) * speeds[matmul_dtype]
        mfu = f"{flops / peak:.1%}" if peak else "n/a"  # of the bf16 peak, as the trainer reports it
        name = config.trainer.compute_dtype if matmul_dtype == "compute" else "fp8"
        print(
            f"{name} | {run.compile_seconds:.1f} | {speeds[matmul_dtype]:,.0f} | {mfu} | "
            f"{statistics.mean(run.losses[-10:]):.4f} | {run.losses[-1]:.4f}"
        )
    print(f"ratio: {speeds['fp8'] / speeds['compute']:.2f}")


if __name__ == "__main__":
    main()
