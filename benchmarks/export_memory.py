"""Peak host memory a Hugging Face export adds, to a local directory and straight into an S3 bucket, against
the bound the export promises: the largest tensor plus its buffer.

A Llama of about 640 MB of float32 parameters (the defaults) is made on CPU in a fresh process for each
side (``--devices N``: sharded over N CPU devices, as a trained model is laid out for export, so fetching
a parameter gathers its shards), and the export's added peak is that process's high-water mark (VmHWM,
reset through ``/proc/self/clear_refs`` once the model is made, or a thread sampling VmRSS every
millisecond where that is not allowed) minus its resident memory before the export. The sides:

- ``local``: shards streamed to files; the buffer is one converted piece (``PIECE_BYTES``, 16 MiB).
- ``bucket``: shards of at most ``--shard-mib`` assembled in memory and written one object each to moto's
  S3 server (in its own process, so its copies are not counted). The buffer is the largest shard three
  times: the shard itself and TensorStore's copy of it, which its Python binding makes (briefly twice) as
  it takes the object.
- ``put``: the reference for that factor, one ``Directory.write_bytes`` of a buffer the size of the
  largest shard, filled first, in the same kind of process.

The two exports are checked to be the same files, byte for byte. Printed last, ``ratio: ...``: each
export's added peak over its bound (target <= 1.0, with an allowance of 5% for what an export makes beside
its buffers: the programs that slice layers out of the stacked arrays, about 16 MiB whatever the depth,
and the freed slices the allocator keeps for reuse), and the measured factor of one PUT.

    uv run python benchmarks/export_memory.py [--layers 8] [--hidden 1024] [--vocab 32000] [--shard-mib 128]
        [--devices 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MIB = 2**20


def _status(field: str) -> int:
    """A field of /proc/self/status (VmRSS, VmHWM), in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


class Peak:
    """The process's peak resident memory from now on: the kernel's high-water mark, reset, or where the
    reset is refused the maximum of VmRSS sampled every millisecond."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._highest, self._sampler = None, None
        except OSError:
            self._highest, self._stop = _status("VmRSS"), threading.Event()
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.001):
            self._highest = max(self._highest, _status("VmRSS"))

    def bytes(self) -> int:
        if self._sampler is None:
            return _status("VmHWM")
        self._stop.set()
        self._sampler.join()
        return max(self._highest, _status("VmRSS"))


def config(args):
    from meltemi.trainer.config import ModelConfig

    return ModelConfig(
        vocab_size=args.vocab,
        hidden_dim=args.hidden,
        intermediate_dim=args.hidden * 11 // 4,
        num_layers=args.layers,
        num_heads=args.hidden // 64,
        num_kv_heads=args.hidden // 128,
        max_seq_len=2048,
    )


def sharded(model, devices):
    """``model`` with each parameter's first axis split over ``devices`` where it divides (else replicated),
    as a trained model is laid out for export: fetching such an array to the host gathers its shards."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(devices, ("d",))

    def place(array):
        split = array.ndim and array.shape[0] % len(devices) == 0
        return jax.device_put(array, NamedSharding(mesh, PartitionSpec("d" if split else None)))

    return jax.tree_util.tree_map(place, model)


def child(args) -> None:
    """One side, in this fresh process: print its figures as JSON."""
    import gc

    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import jax

    jax.config.update("jax_platforms", "cpu")
    from meltemi.datastore.storage import Directory

    shard = args.shard_mib * MIB
    if args.side == "put":
        gc.collect()
        before, peak = _status("VmRSS"), Peak()
        buffer, piece = bytearray(args.put_bytes), os.urandom(MIB)
        for start in range(0, args.put_bytes, MIB):
            buffer[start : start + MIB] = piece[: args.put_bytes - start]
        Directory(args.out).write_bytes("object", buffer)
        print(json.dumps({"added": peak.bytes() - before, "size": len(buffer)}))
        return

    from meltemi.trainer.hf import export_hf
    from meltemi.trainer.model.llama import Llama

    model = sharded(Llama.init(config(args), key=jax.random.key(0)), jax.devices())
    jax.block_until_ready(model)
    gc.collect()
    before = _status("VmRSS")
    peak = Peak()
    started = time.perf_counter()
    export_hf(model, args.out, max_shard_bytes=shard)
    seconds = time.perf_counter() - started
    added = peak.bytes() - before
    print(json.dumps({"added": added, "retained": _status("VmRSS") - before, "seconds": seconds}))


def run_side(side: str, out: str, args, **extra) -> dict:
    shape = [
        "--layers",
        args.layers,
        "--hidden",
        args.hidden,
        "--vocab",
        args.vocab,
        "--shard-mib",
        args.shard_mib,
    ]
    command = [sys.executable, __file__, "--side", side, "--out", out, *map(str, shape)]
    command += [f"--{k.replace('_', '-')}={v}" for k, v in extra.items()]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {side} side failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(args) -> None:
    import math

    from trainer_checkpoint_bucket import make_bucket, start_server

    from meltemi.datastore.storage import Directory
    from meltemi.trainer.hf.layout import hf_tensors
    from meltemi.trainer.hf.safetensors_files import PIECE_BYTES

    tensors = [math.prod(t.shape) * 4 for t in hf_tensors(config(args)).values()]
    largest, total = max(tensors), sum(tensors)
    server, endpoint = start_server(0.0)
    try:
        bucket_name = make_bucket(endpoint)
        url = f"s3://{bucket_name}/hf/bench"
        local = Path(tempfile.mkdtemp()) / "hf"
        measured = {"local": run_side("local", str(local), args), "bucket": run_side("bucket", url, args)}
        files = {p.name: p.read_bytes() for p in local.iterdir()}
        bucket = Directory(url)
        assert bucket.list() == sorted(files), "the two exports hold different files"
        assert all(bucket.read_bytes(name) == data for name, data in files.items()), "different bytes"
        shard = max(len(data) for name, data in files.items() if name.endswith(".safetensors"))
        shards = len([name for name in files if name.endswith(".safetensors")])
        files.clear()
        put = run_side("put", f"s3://{bucket_name}/put", args, put_bytes=shard)
    finally:
        server.kill()
    print(
        f"model: {total / MIB:,.0f} MiB of float32 parameters, largest tensor {largest / MIB:,.1f} MiB; "
        f"{shards} shard(s) of at most {args.shard_mib} MiB (largest {shard / MIB:,.1f} MiB), the same bytes "
        "local and in the bucket"
    )
    bounds = {"local": largest + PIECE_BYTES, "bucket": largest + 3 * shard}
    for side, figures in measured.items():
        print(
            f"{side:6}: added peak {figures['added'] / MIB:7,.1f} MiB, bound {bounds[side] / MIB:7,.1f} MiB, "
            f"kept after {figures['retained'] / MIB:6,.1f} MiB, {figures['seconds']:5.1f} s"
        )
    size, added = put["size"], put["added"]
    print(f"put   : one {size / MIB:,.1f} MiB object through the seam adds {added / MIB:,.1f} MiB")
    local, bucket = measured["local"]["added"], measured["bucket"]["added"]
    print(f"ratio: local export peak / (largest tensor + piece) {local / bounds['local']:.3f}")
    print(f"ratio: bucket export peak / (largest tensor + 3 x largest shard) {bucket / bounds['bucket']:.3f}")
    print(f"ratio: bucket export peak / (largest tensor + largest shard) {bucket / (largest + shard):.3f}")
    print(f"ratio: one PUT's peak / its size {added / size:.2f} (the buffer and TensorStore's copies)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--shard-mib", type=int, default=128)
    parser.add_argument("--devices", type=int, default=1, help="CPU devices the model is sharded over")
    parser.add_argument("--side", choices=["local", "bucket", "put"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--put-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.side is None:
        main(args)
    else:
        child(args)
