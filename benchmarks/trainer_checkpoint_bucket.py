"""Checkpoints in a bucket (the S3 server on loopback, in its own process): how fast a restore reads, and
what asynchronous checkpointing costs the step loop.

Restore of a checkpoint of a few hundred MiB (`restore`: every array opened and every shard requested
before any is awaited) against two references measured in the same run: the same objects fetched with
concurrent raw GETs (every key's read issued at once on the same TensorStore kvstore; the limit), and the
arrays read one after another. Then the step loop: `--steps` steps with a checkpoint to the bucket every
`--every` steps (`Checkpointer.save`, the trainer's path) against the same steps with none.

    uv run python benchmarks/trainer_checkpoint_bucket.py [--layers 8] [--hidden 384] [--steps 30]
        [--latency-ms 30] [--pin] [--rounds 3]

A loopback server answers at once, and on this 2-core machine it computes on the cores the client uses, so
requests in flight together are served no faster than one after another. ``--latency-ms`` makes the server
wait that long before answering each request (without using a core), as a real bucket's time to first
byte does (tens of milliseconds on GCS and S3): what concurrent restore is for. The server's CPU seconds
per checkpoint are printed too (on a real bucket that work is not on the training machine), and the step
loop checkpointing to ``memory://`` through the same code: the client's own share of the overhead. ``--pin``
puts the server on a core of its own and the training on the others, as a remote bucket's work is.

The last lines are `ratio: ...`: restore throughput / raw GET throughput (target >= 0.7), sequential time /
restore time (target >= 3), and step time with checkpoints / without (target <= 1.05). ``--rounds N`` runs
the three step loops (none, the bucket, ``memory://``) N times, interleaved, and keeps each one's median, so
that a slower minute of a shared machine does not fall on one kind.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
import logging, sys, threading, time
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server
logging.getLogger("werkzeug").setLevel(logging.ERROR)
latency, app = float(sys.argv[1]), DomainDispatcherApplication(create_backend_app)
def delayed(environ, start_response):
    time.sleep(latency)  # a thread per request: waiting requests overlap, as on a remote bucket
    return app(environ, start_response)
server = make_server("127.0.0.1", 0, delayed, True, request_handler=MotoRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
sys.stdin.read()
"""


def pin_server_core() -> tuple[set[int], set[int]] | None:
    """The cores for the server (the last one) and for this process (the others), or None with fewer than
    two: a remote bucket's work is not done on the training machine, so with ``--pin`` the server's is
    kept off the cores the step computes on."""
    cores = sorted(os.sched_getaffinity(0))
    return None if len(cores) < 2 else ({cores[-1]}, set(cores[:-1]))


def start_server(latency_seconds: float, core: set[int] | None = None) -> tuple[subprocess.Popen, str]:
    """moto's S3 server in a process of its own (so it does not share this one's interpreter lock),
    answering each request after ``latency_seconds``, on ``core`` when given."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(latency_seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=None if core is None else lambda: os.sched_setaffinity(0, core),
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


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used so far (Linux's /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    parser.add_argument(
        "--rounds", type=int, default=1, help="step loops of each kind, interleaved (the median is kept)"
    )
    parser.add_argument("--latency-ms", type=float, default=0.0, help="the server's wait before each answer")
    parser.add_argument(
        "--pin", action="store_true", help="the server on a core of its own, the training on the others"
    )
    args = parser.parse_args()
    pinned = pin_server_core() if args.pin else None
    if pinned is not None:
        os.sched_setaffinity(0, pinned[1])  # before JAX starts its threads
    config = load_config("configs/tiny.yaml", [
        "--model.num_layers", str(args.layers), "--model.hidden_dim", str(args.hidden),
        "--model.intermediate_dim", str(3 * args.hidden), "--data.seq_len", "64", "--trainer.mesh.data", "1",
        "--trainer.checkpoint_every", str(args.every), "--model.attention", "xla",
        "--model.cross_entropy", "xla",
    ])  # fmt: skip
    server, endpoint = start_server(args.latency_ms / 1e3, None if pinned is None else pinned[0])
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

            in_memory = Checkpointer("memory://bench/run", config.trainer, config.model_dump(mode="json"))

            def loop(saver: Checkpointer | None) -> tuple[float, float]:
                """Seconds per step, and the server's CPU seconds over the loop."""
                nonlocal state
                started, cpu = time.perf_counter(), cpu_seconds(server.pid)
                for index in range(args.steps):
                    if saver and index and index % args.every == 0:
                        saver.save(state)
                    state, metrics = step(state, data[index % len(data)])
                    jax.block_until_ready(metrics.loss)
                if saver:
                    saver.wait()
                return (time.perf_counter() - started) / args.steps, cpu_seconds(server.pid) - cpu

            loop(None)  # warm
            kinds = {"without": None, "bucket": checkpointer, "memory": in_memory}
            rounds = [{kind: loop(saver) for kind, saver in kinds.items()} for _ in range(args.rounds)]
            without, with_saves, with_memory = (
                statistics.median(r[kind][0] for r in rounds) for kind in kinds
            )
            server_cpu = statistics.median(r["bucket"][1] - r["without"][1] for r in rounds)
            spread = {
                kind: [f"{r[kind][0] / r['without'][0]:.3f}" for r in rounds] for kind in ("bucket", "memory")
            }
    finally:
        server.stdin.close()
        server.wait()
    mib = size / 2**20
    print(
        f"device: {jax.devices()[0].device_kind}; {len(manifest.arrays)} arrays, {len(keys)} objects, "
        f"{mib:.1f} MiB; the server answers after {args.latency_ms:g} ms"
        + ("" if pinned is None else f", on core {min(pinned[0])}; the training on {sorted(pinned[1])}")
    )
    for name, seconds in best.items():
        print(f"{name}: {seconds:.2f} s ({mib / seconds:.0f} MiB/s)")
    print(
        f"step: {without * 1e3:.0f} ms without checkpoints, {with_saves * 1e3:.0f} ms with one every "
        f"{args.every}; the server's CPU: {server_cpu:.2f} s more with them "
        f"({server_cpu / (args.steps // args.every - 1):.2f} s a checkpoint)"
    )
    print(f"ratio: restore / raw GET throughput {best['raw'] / best['restore']:.2f} (target >= 0.7)")
    print(f"ratio: sequential / restore time {best['sequential'] / best['restore']:.2f} (target >= 3)")
    print(
        f"step with one every {args.every} to memory:// (the client's work alone): {with_memory * 1e3:.0f} ms"
    )
    if args.rounds > 1:
        print(f"each round's ratios (to the bucket; to memory://): {spread['bucket']}; {spread['memory']}")
    print(f"ratio: step with checkpoints / without {with_saves / without:.3f} (target <= 1.05)")
    print(f"ratio: step with checkpoints to memory:// / without {with_memory / without:.3f}")


if __name__ == "__main__":
    main()
