"""Attention forward+backward speed on a GPU: TFLOP/s of "pallas", "mosaic", "cudnn", "xla" and "reference".

Defaults follow the issue: bfloat16, head_dim 128, causal, 32 query heads over 8 key/value heads, sequence
lengths 2k/4k/8k with the batch chosen to keep 8,192 tokens per step. FLOPs count the four matmuls of the
forward (two) and backward (five at the same size, i.e. 2.5x the forward) over the visible half of the
causal score matrix: ``3.5 * 4 * batch * heads * seq**2 * head_dim / 2``. Each figure is the median of
``--repeats`` timed runs after a compile-and-warm-up run, inside one process, so ratios compare like with
like. An implementation that fails (unsupported, out of memory) is reported as such, not skipped silently.

``--documents N`` packs rows of about N documents (segment ids, random boundaries, the same for every
implementation), as the trainer's batches hold them; cuDNN takes no segment ids and says so. FLOPs are
counted as for whole rows either way, so TFLOP/s at the same shape compare times.

``--pallas-blocks`` times the Pallas kernel at several tile settings in the same process (each
``Q,K,BACKWARD_Q,BACKWARD_K[,WARPS[,STAGES]]``), so a GPU session chooses its defaults at the model's own
shapes. ``--memory`` compiles each implementation's forward+backward without running it and prints XLA's
plan of its temporaries beside the reference's; it needs no GPU (on a CPU the Pallas kernel is interpreted,
so its figure is that program's, not a GPU's, though the kernel's inputs and outputs are the same).

``--mosaic-blocks`` does the same for our Mosaic GPU kernels (``Q,K,BACKWARD_Q,BACKWARD_K[,STAGES]``:
tiles multiples of 64, buffers per stream). ``--forward-only`` times the forward pass alone (FLOPs: its two
matmuls). ``--implementations ... jax-mosaic`` adds JAX's own flash attention on the Mosaic GPU backend
(``jax.experimental.pallas.ops.gpu.attention_mgpu``, whole rows, Hopper), a yardstick for ours.

Without a GPU the script says so and exits; ``--smoke`` runs tiny shapes on any backend to check it works
(those numbers mean nothing).

Run: ``uv run python benchmarks/kernels_attention.py [--seqs 2048 4096 8192] [--repeats 10]``; the 1B step's
shapes: ``--seqs 4096 --tokens 32768 --head-dim 64 [--documents 4]``; a sweep there: ``--documents 4
--implementations pallas --pallas-blocks 128,64,64,64 128,128,64,64 64,64,64,64,4,3``; temporaries on any
machine: ``--seqs 4096 --tokens 32768 --head-dim 64 --documents 4 --memory``
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time

import jax
import jax.numpy as jnp

from meltemi.kernels import PallasAttentionConfig, attention
from meltemi.kernels._attention_args import check_attention_inputs
from meltemi.kernels.attention_mosaic import MosaicAttentionConfig
from meltemi.kernels.attention_mosaic import mosaic_attention as our_mosaic_attention
from meltemi.kernels.attention_pallas import pallas_attention

IMPLEMENTATIONS = ("pallas", "mosaic", "cudnn", "xla", "reference")
# Only by --implementations: JAX's own flash attention on the Mosaic GPU backend (Hopper), whole rows only.
JAX_MOSAIC = "jax-mosaic"


def flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool, forward_only: bool = False) -> float:
    forward = 4.0 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0)
    return forward if forward_only else 3.5 * forward


def segment_ids(batch: int, seq: int, documents: int, seed: int) -> jax.Array | None:
    """Rows of about ``documents`` documents (a boundary after each token with probability documents/seq),
    or None (whole rows) when ``documents`` is 0."""
    if documents <= 0:
        return None
    starts = jax.random.uniform(jax.random.PRNGKey(seed), (batch, seq)) < documents / seq
    return jnp.cumsum(starts, axis=1).astype(jnp.int32)


def pallas_blocks(text: str) -> PallasAttentionConfig:
    """``Q,K,BACKWARD_Q,BACKWARD_K[,WARPS[,STAGES]]`` as a config (argparse's type: a bad one is named)."""
    try:
        numbers = [int(part) for part in text.split(",")]
        if len(numbers) not in (4, 5, 6):
            raise ValueError("four to six integers")
        names = ("block_q", "block_k", "backward_block_q", "backward_block_k", "num_warps", "num_stages")
        return PallasAttentionConfig(**dict(zip(names, numbers, strict=False)))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"--pallas-blocks {text!r}: expected Q,K,BACKWARD_Q,BACKWARD_K[,WARPS[,STAGES]] ({error})"
        ) from None


def mosaic_blocks(text: str) -> MosaicAttentionConfig:
    """``Q,K,BACKWARD_Q,BACKWARD_K[,STAGES]`` as a Mosaic kernel config (argparse's type: a bad one is
    named)."""
    try:
        numbers = [int(part) for part in text.split(",")]
        if len(numbers) not in (4, 5):
            raise ValueError("four or five integers")
        names = ("block_q", "block_k", "backward_block_q", "backward_block_k", "stages")
        return MosaicAttentionConfig(**dict(zip(names, numbers, strict=False)))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"--mosaic-blocks {text!r}: expected Q,K,BACKWARD_Q,BACKWARD_K[,STAGES], tiles multiples of 64 "
            f"({error})"
        ) from None


def label(config: PallasAttentionConfig | MosaicAttentionConfig) -> str:
    tiles = (config.block_q, config.block_k, config.backward_block_q, config.backward_block_k)
    if isinstance(config, MosaicAttentionConfig):
        return "mosaic[" + ",".join(str(n) for n in (*tiles, config.stages)) + "]"
    launch = (config.num_warps, config.num_stages) if config.num_warps else ()
    return "pallas[" + ",".join(str(n) for n in (*tiles, *launch)) + "]"


def jax_mosaic_attention(q, k, v, segments, causal: bool):
    """``jax.experimental.pallas.ops.gpu.attention_mgpu`` (JAX's example flash attention on Mosaic GPU, the
    backend JAX keeps) on whole rows, with the softmax scale applied to ``q`` as the others apply it: a
    yardstick for a Mosaic GPU port of our kernel. It takes no segment ids, and raises where its JAX
    version lacks a causal backward pass."""
    from jax.experimental.pallas.ops.gpu import attention_mgpu

    if segments is not None:
        raise ValueError("JAX's Mosaic GPU attention takes no segment ids")
    tiles = dict(block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64)
    config = attention_mgpu.TuningConfig(
        block_q=64, block_kv=128, max_concurrent_steps=2, causal=causal, **tiles
    )
    scaled = (q * (q.shape[-1] ** -0.5)).astype(q.dtype)
    return attention_mgpu.attention(scaled, k, v, config)


def step_function(
    implementation: str,
    causal: bool,
    config: PallasAttentionConfig | MosaicAttentionConfig | None,
    forward_only=False,
):
    """The jitted step to time: the gradient of a weighted sum of the output with respect to q, k and v, or
    with ``forward_only`` the output alone (called with the same arguments). ``config``: the Pallas or
    Mosaic kernel's tiles (``None``: its defaults)."""

    def run(q, k, v, segments):
        if implementation == JAX_MOSAIC:
            return jax_mosaic_attention(q, k, v, segments, causal)
        if implementation in ("pallas", "mosaic") and config is not None:
            spec = check_attention_inputs(
                q, k, v, segments, causal=causal, sliding_window=None, softmax_scale=None
            )
            kernel = pallas_attention if implementation == "pallas" else our_mosaic_attention
            return kernel(q, k, v, segments, spec, config)
        return attention(
            q,
            k,
            v,
            causal=causal,
            segment_ids=segments,
            implementation=implementation,
            check_finite=False,
        )

    def loss(q, k, v, segments, d_out):
        return jnp.sum(run(q, k, v, segments).astype(jnp.float32) * d_out)

    if forward_only:
        return jax.jit(lambda q, k, v, segments, d_out: run(q, k, v, segments))
    return jax.jit(jax.grad(loss, argnums=(0, 1, 2)))


def failure(error: Exception) -> str:
    """The first line of ``error``'s message, with its type (an assertion may carry no message)."""
    first = (str(error).splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def time_it(function, arguments, repeats: int) -> float:
    jax.block_until_ready(function(*arguments))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(function(*arguments))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per step: batch = tokens // seq")
    parser.add_argument("--not-causal", action="store_true")
    parser.add_argument(
        "--forward-only", action="store_true", help="time the forward pass alone (FLOPs: its two matmuls)"
    )
    parser.add_argument(
        "--documents", type=int, default=0, help="documents per row (segment ids); 0: whole rows"
    )
    parser.add_argument(
        "--implementations",
        nargs="+",
        default=list(IMPLEMENTATIONS),
        choices=(*IMPLEMENTATIONS, JAX_MOSAIC),
        help=f"default: {' '.join(IMPLEMENTATIONS)}; {JAX_MOSAIC}: JAX's Mosaic GPU attention, whole rows",
    )
    parser.add_argument("--block-q", type=int, default=128)
    parser.add_argument("--block-k", type=int, default=64)
    parser.add_argument("--backward-block", type=int, default=64)
    parser.add_argument(
        "--pallas-blocks",
        type=pallas_blocks,
        nargs="+",
        default=[],
        metavar="Q,K,BQ,BK[,WARPS[,STAGES]]",
        help="also time the Pallas kernel at each of these tile settings",
    )
    parser.add_argument(
        "--mosaic-blocks",
        type=mosaic_blocks,
        nargs="+",
        default=[],
        metavar="Q,K,BQ,BK[,STAGES]",
        help="also time our Mosaic GPU kernels at each of these tile settings (multiples of 64) and depths",
    )
    parser.add_argument(
        "--memory", action="store_true", help="print XLA's plan of each step's temporaries instead of timing"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on any backend, to test the script")
    args = parser.parse_args()

    device = jax.devices()[0]
    print(f"device: {device.platform} ({device.device_kind}); jax {jax.__version__}; {datetime.date.today()}")
    if device.platform != "gpu" and not (args.smoke or args.memory):
        print("No GPU is present: attention speed figures are left open (run this on a GPU).")
        sys.exit(0)
    if args.smoke:
        args.seqs, args.heads, args.kv_heads, args.head_dim, args.repeats = [64, 128], 4, 2, 16, 2
        args.tokens = 256
        print("smoke run: tiny shapes to exercise the script; these numbers mean nothing")

    causal = not args.not_causal
    config = PallasAttentionConfig(
        block_q=args.block_q,
        block_k=args.block_k,
        backward_block_q=args.backward_block,
        backward_block_k=args.backward_block,
    )
    runs = [(name, config if name == "pallas" else None) for name in args.implementations]
    runs += [(label(blocks), blocks) for blocks in (*args.pallas_blocks, *args.mosaic_blocks)]
    passes = "forward" if args.forward_only else "forward+backward"
    print(
        f"{passes}, bfloat16, heads {args.heads}/{args.kv_heads}, head_dim {args.head_dim}, "
        f"causal={causal}, {args.tokens} tokens per step where the sequence allows, "
        + (f"rows of about {args.documents} documents (segment ids)" if args.documents else "whole rows")
    )
    for seq in args.seqs:
        batch = max(1, args.tokens // seq)
        if args.memory:
            report_memory(runs, causal, batch, seq, args)
            continue
        keys = jax.random.split(jax.random.PRNGKey(seq), 4)
        q = jax.random.normal(keys[0], (batch, seq, args.heads, args.head_dim), jnp.bfloat16)
        k = jax.random.normal(keys[1], (batch, seq, args.kv_heads, args.head_dim), jnp.bfloat16)
        v = jax.random.normal(keys[2], (batch, seq, args.kv_heads, args.head_dim), jnp.bfloat16)
        d_out = jax.random.normal(keys[3], q.shape, jnp.float32)
        segments = segment_ids(batch, seq, args.documents, seed=seq + 1)
        work = flops(batch, args.heads, seq, args.head_dim, causal, args.forward_only)
        tflops = {}
        for name, run_config in runs:
            implementation = name.split("[")[0]
            try:
                seconds = time_it(
                    step_function(implementation, causal, run_config, args.forward_only),
                    (q, k, v, segments, d_out),
                    args.repeats,
                )
            except Exception as error:
                reason = failure(error)
                print(f"  seq {seq:6d} batch {batch:3d} {name:>9}: failed: {reason}")
                continue
            tflops[name] = work / seconds / 1e12
            print(
                f"  seq {seq:6d} batch {batch:3d} {name:>9}: {seconds * 1e3:9.3f} ms "
                f"{tflops[name]:8.2f} TFLOP/s"
            )
        for name in (n for n in tflops if n.startswith(("pallas", "mosaic"))):
            for other in ("cudnn", "xla"):
                if other in tflops:
                    print(f"  seq {seq:6d} {name} / {other}: {tflops[name] / tflops[other]:.2f}x")


def report_memory(runs, causal: bool, batch: int, seq: int, args: argparse.Namespace) -> None:
    """Compile each run's forward+backward from abstract shapes and print its temporaries (XLA's plan)."""
    q = jax.ShapeDtypeStruct((batch, seq, args.heads, args.head_dim), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((batch, seq, args.kv_heads, args.head_dim), jnp.bfloat16)
    segments = jax.ShapeDtypeStruct((batch, seq), jnp.int32) if args.documents else None
    d_out = jax.ShapeDtypeStruct(q.shape, jnp.float32)
    temporaries = {}
    for name, run_config in runs:
        implementation = name.split("[")[0]
        try:
            traced = step_function(implementation, causal, run_config).trace(q, kv, kv, segments, d_out)
            plan = traced.lower().compile().memory_analysis()
        except Exception as error:
            print(f"  seq {seq:6d} batch {batch:3d} {name:>9}: failed: {failure(error)}")
            continue
        temporaries[name] = plan.temp_size_in_bytes
        print(f"  seq {seq:6d} batch {batch:3d} {name:>9}: temporaries {temporaries[name] / 2**20:10.1f} MiB")
    if "reference" in temporaries:
        for name, size in temporaries.items():
            print(f"  seq {seq:6d} {name} / reference: {size / temporaries['reference']:.3f}")


if __name__ == "__main__":
    main()
