"""What a checkpoint costs the step loop: the time the loop waits (the host copy) against the wall time of a
checkpoint interval, on the tiny config by default.

The state is saved the way the trainer saves it (`Checkpointer.save`: copy this process's shards to host,
then write in a background thread); the loop keeps stepping while the write runs. The last line is
`ratio: <seconds the loop waited per checkpoint / seconds of one interval>` (target: under 0.05).

    uv run python benchmarks/trainer_checkpoint.py [--config configs/tiny.yaml] [--interval 100]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import jax
from trainer_step import batches

from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.checkpointer import Checkpointer
from meltemi.trainer.config_io import load_config
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.train_step import init_state, make_train_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument(
        "--interval", type=int, default=None, help="steps per checkpoint (default: the config's)"
    )
    parser.add_argument("--saves", type=int, default=3, help="checkpoints to time")
    parser.add_argument("--steps", type=int, default=3, help="steps timed between saves")
    args, overrides = parser.parse_known_args()
    config = load_config(args.config, ["--trainer.mesh.data", "1", *overrides])
    interval = args.interval or config.trainer.checkpoint_every
    plan = MeshPlan.of(config, jax.devices()[:1])
    data = [adapters.named_batch(b) for b in batches(config, args.steps, config.trainer.batch_sizes()[0])]
    with jax.set_mesh(plan.mesh), tempfile.TemporaryDirectory() as run_dir:
        state = jax.jit(lambda k: init_state(config, k))(adapters.jax_key(0, "init"))
        step = jax.jit(make_train_step(config), donate_argnums=0).lower(state, data[0]).compile()
        checkpointer = Checkpointer(Path(run_dir), config.trainer, config.model_dump(mode="json"))
        state, metrics = step(state, data[0])
        jax.block_until_ready(metrics.loss)
        step_seconds, blocked, written = [], [], []
        for _ in range(args.saves):
            started = time.perf_counter()
            for batch in data:
                state, metrics = step(state, batch)
            jax.block_until_ready(metrics.loss)
            step_seconds.append((time.perf_counter() - started) / len(data))
            before = checkpointer.seconds_blocked
            started = time.perf_counter()
            checkpointer.save(state)
            blocked.append(checkpointer.seconds_blocked - before)
            checkpointer.wait()
            written.append(time.perf_counter() - started)
        size = sum(p.stat().st_size for p in Path(run_dir).rglob("*") if p.is_file())
    per_step = statistics.median(step_seconds)
    wait = statistics.median(blocked)
    print(f"device: {jax.devices()[0].device_kind}; config {args.config}; checkpoint every {interval} steps")
    commit = statistics.median(written)
    print(f"checkpoint: {size / 2**20:.1f} MiB on disk; background write to commit {commit:.2f} s")
    print(
        f"step: {per_step * 1e3:.0f} ms; interval {per_step * interval:.1f} s; loop waits {wait * 1e3:.1f} ms"
    )
    print(f"ratio: {wait / (per_step * interval):.4f}")


if __name__ == "__main__":
    main()
