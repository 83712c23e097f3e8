"""Checkpoints in a bucket (the S3 server on loopback, in its own process): how fast a restore reads, and
what asynchronous checkpointing costs the step loop.

Restore of a checkpoint of a few hundred MiB (`restore`: every array opened and every shard requested
before any is awaited) against two references measured in the same run: the same objects fetched with
concurrent raw GETs (every key's read issued at once on the same TensorStore kvstore; the limit), and the
arrays read one after another. Then the step loop: `--steps` steps with a checkpoint to the bucket every
`--every` steps (`Checkpointer.save`, the trainer's path) against the same steps with none.

    uv run python benchmarks/trainer_checkpoint_bucket.py [--layers 8] [--hidden 384] [--steps 30]

The last lines are `ratio: ...`: restore throughput / raw GET throughput (target >= 0.7), sequential time /
restore time (target >= 3), and step time with checkpoints / without (target <= 1.05).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import jax
from trainer_step import batches

from meltemi.datastore.storage import Directory
from meltemi.datastore.testing import TEST_KEYS
from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.checkpointer import Checkpointer, inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.checkpoint.restore import restore
from meltemi.trainer.config_io import load_config
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.train_step import init_state, make_train_step

SERVER = """
import logging, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from meltemi.datastore.testing import start_s3_server
server = start_s3_server()
print(server.endpoint, flush=True)
sys.stdin.read()
"""


def start_server() -> tuple[subprocess.Popen, str]:
    """moto's S3 server in a process of its own (so it does not share this one's interpreter lock)."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    endpoint = process.stdout.readline().strip()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", **TEST_KEYS})
    return process, endpoint


def make_bucket(endpoint: str) -> str:
    import boto3

    name = f"bench-{os.getpid()}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=TEST_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TEST_KEYS["AWS_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=name)
    return name


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="restore measurements (the best is kept)")
    args = parser.parse_args()
    config = load_config("configs/tiny.yaml", [
        "--model.num_layers", str(args.layers), "--model.hidden_dim", str(args.hidden),
        "--model.intermediate_dim", str(3 * args.hidden), "--data.seq_len", "64", "--trainer.mesh.data", "1",
        "--trainer.checkpoint_every", str(args.every), "--model.attention", "xla",
        "--model.cross_entropy", "xla",
    ])  # fmt: skip
    server, endpoint = start_server()
    try:
        run = f"s3://{make_bucket(endpoint)}/run"
        plan = MeshPlan.of(config, jax.devices()[:1])
        rows = config.trainer.batch_sizes()[0]
        data = [adapters.named_batch(b) for b in batches(config, args.every, rows)]
        with jax.set_mesh(plan.mesh):
            state = jax.jit(lambda k: init_state(config, k))(adapters.jax_key(0, "init"))
            step = jax.jit(make_train_step(config), donate_argnums=0).lower(state, data[0]).compile()
            checkpointer = Checkpointer(run, config.trainer, config.model_dump(mode="json"))
            saved = checkpointer.save(state, wait=True)
            manifest = inspect_checkpoint(saved)
            keys = Directory(saved).list()
            size = sum(len(Directory(saved).read_bytes(k)) for k in keys)
            abstract = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
            shardings = jax.tree_util.tree_map(lambda a: a.sharding, state)

            def restored():
                jax.block_until_ready(restore(saved, manifest, abstract, shardings))

            def raw():
                store = Directory(saved).kvstore
                for future in [store.read(k) for k in keys]:
                    future.result()

            def sequential():
                for record in manifest.arrays:
                    read_array(saved, record)

            works = {"restore": restored, "raw": raw, "sequential": sequential}
            best = {name: min(timed(work) for _ in range(args.repeats)) for name, work in works.items()}

            def loop(save: bool) -> float:
                nonlocal state
                started = time.perf_counter()
                for index in range(args.steps):
                    if save and index and index % args.every == 0:
                        checkpointer.save(state)
                    state, metrics = step(state, data[index % len(data)])
                    jax.block_until_ready(metrics.loss)
                checkpointer.wait()
                return (time.perf_counter() - started) / args.steps

            loop(False)  # warm
            without, with_saves = loop(False), loop(True)
    finally:
        server.stdin.close()
        server.wait()
    mib = size / 2**20
    print(
        f"device: {jax.devices()[0].device_kind}; {len(manifest.arrays)} arrays, {len(keys)} objects, "
        f"{mib:.1f} MiB"
    )
    for name, seconds in best.items():
        print(f"{name}: {seconds:.2f} s ({mib / seconds:.0f} MiB/s)")
    print(
        f"step: {without * 1e3:.0f} ms without checkpoints, {with_saves * 1e3:.0f} ms with one every "
        f"{args.every}"
    )
    print(f"ratio: restore / raw GET throughput {best['raw'] / best['restore']:.2f} (target >= 0.7)")
    print(f"ratio: sequential / restore time {best['sequential'] / best['restore']:.2f} (target >= 3)")
    print(f"ratio: step with checkpoints / without {with_saves / without:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
