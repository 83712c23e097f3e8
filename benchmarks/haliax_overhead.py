"""What do named axes cost? A Llama-style block, forward + backward under ``jit``, twice: once written with
haliax-lite the way a user writes it (``hax.nn`` layers; attention as ``hax.dot`` of q and k over the head
size, a softmax over the key position and ``hax.dot`` with v; SwiGLU) and once in plain ``jax.numpy``
(einsums with hand-chosen layouts), with the same parameters and the same math.

Prints the compiled FLOP counts of both programs (``cost_analysis``), the largest difference between their
losses and gradients, and the median time ratio haliax-lite / plain over alternating trials. Each trial
times both programs back to back (in alternating order) and keeps each side's fastest of a few steps, since
a noisy neighbour on a shared machine only ever adds time; a neighbour that slows both sides of a pair
cancels out of that pair's ratio, and the median discards the pairs it hit unevenly.

It measures three settings (``--meshes``): one device, and the batch split over a 4-device mesh
(``batch -> data``) whose axes are ``Auto``, then ``Explicit`` (JAX's sharding in types, ``jax.set_mesh``).
On CPU the 4 devices are host-platform devices (``--xla_force_host_platform_device_count``, set below
before JAX starts). On a mesh the plain side is the same code with its input placed by a NamedSharding;
the named side is ``hax.named_jit`` with the axis mapping.

Target: ratio <= 1.02 and no more FLOPs than plain JAX, in every setting.
Run: ``uv run benchmarks/haliax_overhead.py [--trials N] [--meshes none auto explicit]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time

MESH_DEVICES = 4
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={MESH_DEVICES}".strip()
    )

import equinox as eqx  # noqa: E402  (after XLA_FLAGS: JAX reads them when it starts)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import haliax_lite as hax  # noqa: E402
import haliax_lite.nn as hnn  # noqa: E402

Batch = hax.Axis("batch", 4)
Pos = hax.Axis("position", 256)
KPos = Pos.alias("key_position")
Embed = hax.Axis("embed", 256)
KVHeads = hax.Axis("kv_heads", 2)
QPerKV = hax.Axis("q_per_kv", 4)
HeadSize = hax.Axis("head_size", 32)
Mlp = hax.Axis("mlp", 704)
ROPE_THETA = 10_000.0
EPS = 1e-5


# ---------------------------------------------------------------- haliax-lite


def rope_tables(Pos: hax.Axis, HeadSize: hax.Axis) -> tuple[hax.NamedArray, hax.NamedArray]:
    """cos and sin of the rotary angles, ``(position, head_size)``, halves repeated as in Llama."""
    Half = HeadSize.resize(HeadSize.size // 2)
    inv_freq = 1.0 / ROPE_THETA ** (hax.arange(Half, step=2) / HeadSize.size)
    angles = hax.arange(Pos).broadcast_axis(Half) * inv_freq
    angles = hax.concatenate(HeadSize, [angles, angles])
    return hax.cos(angles), hax.sin(angles)


def apply_rope(x: hax.NamedArray, cos: hax.NamedArray, sin: hax.NamedArray) -> hax.NamedArray:
    half = HeadSize.size // 2
    rotated = hax.concatenate(HeadSize, [-x[HeadSize.name, half:], x[HeadSize.name, :half]])
    return x * cos + rotated * sin


class NamedBlock(eqx.Module):
    attn_norm: hnn.RmsNorm
    q_proj: hnn.Linear
    k_proj: hnn.Linear
    v_proj: hnn.Linear
    o_proj: hnn.Linear
    mlp_norm: hnn.RmsNorm
    gate_proj: hnn.Linear
    up_proj: hnn.Linear
    down_proj: hnn.Linear

    @staticmethod
    def init(key: jax.Array) -> NamedBlock:
        k = jax.random.split(key, 7)
        return NamedBlock(
            hnn.RmsNorm.init(Embed, eps=EPS, use_bias=False),
            hnn.Linear.init(Embed, (KVHeads, QPerKV, HeadSize), key=k[0], use_bias=False),
            hnn.Linear.init(Embed, (KVHeads, HeadSize), key=k[1], use_bias=False),
            hnn.Linear.init(Embed, (KVHeads, HeadSize), key=k[2], use_bias=False),
            hnn.Linear.init((KVHeads, QPerKV, HeadSize), Embed, key=k[3], use_bias=False),
            hnn.RmsNorm.init(Embed, eps=EPS, use_bias=False),
            hnn.Linear.init(Embed, Mlp, key=k[4], use_bias=False),
            hnn.Linear.init(Embed, Mlp, key=k[5], use_bias=False),
            hnn.Linear.init(Mlp, Embed, key=k[6], use_bias=False),
        )

    def __call__(self, x: hax.NamedArray) -> hax.NamedArray:
        cos, sin = rope_tables(Pos, HeadSize)
        h = self.attn_norm(x)
        q = apply_rope(self.q_proj(h), cos, sin)
        k = apply_rope(self.k_proj(h), cos, sin).rename({Pos.name: KPos.name})
        v = self.v_proj(h).rename({Pos.name: KPos.name})
        # attention as a Haliax user writes it: named dots, a softmax over the key position
        scores = hax.dot(q * (1.0 / jnp.sqrt(HeadSize.size)), k, axis=HeadSize)
        causal = hnn.attention.causal_mask(Pos, KPos)
        weights = hnn.softmax(hax.where(causal, scores, -1e9), axis=KPos)
        attn = hax.dot(weights, v, axis=KPos)
        x = x + self.o_proj(attn)
        h = self.mlp_norm(x)
        return x + self.down_proj(hnn.silu(self.gate_proj(h)) * self.up_proj(h))


def named_loss(block: NamedBlock, x: hax.NamedArray) -> jax.Array:
    return hax.mean(hax.square(block(x))).scalar()


# ---------------------------------------------------------------- plain jax.numpy


def plain_params(block: NamedBlock) -> dict[str, jax.Array]:
    """The same weights as positional arrays, in the layouts the einsums below spell out."""
    order = {
        "attn_norm": ("embed",),
        "mlp_norm": ("embed",),
        "q_proj": ("embed", "kv_heads", "q_per_kv", "head_size"),
        "k_proj": ("embed", "kv_heads", "head_size"),
        "v_proj": ("embed", "kv_heads", "head_size"),
        "o_proj": ("kv_heads", "q_per_kv", "head_size", "embed"),
        "gate_proj": ("embed", "mlp"),
        "up_proj": ("embed", "mlp"),
        "down_proj": ("mlp", "embed"),
    }
    return {name: getattr(block, name).weight.rearrange(axes).array for name, axes in order.items()}


def plain_rms_norm(x: jax.Array, weight: jax.Array) -> jax.Array:
    return weight * (x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + EPS))


def plain_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def plain_block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    """``x``: (batch, position, embed)."""
    seq, d = x.shape[1], HeadSize.size
    inv_freq = 1.0 / ROPE_THETA ** (jnp.arange(0, d, 2) / d)
    angles = jnp.arange(seq)[:, None] * inv_freq[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(angles)[:, None, None, :], jnp.sin(angles)[:, None, None, :]

    h = plain_rms_norm(x, p["attn_norm"])
    q = plain_rope(jnp.einsum("bse,ekgd->bskgd", h, p["q_proj"]), cos, sin)
    k = plain_rope(jnp.einsum("bse,ekd->bskd", h, p["k_proj"]), cos[:, :, 0], sin[:, :, 0])
    v = jnp.einsum("bse,ekd->bskd", h, p["v_proj"])
    scores = jnp.einsum("bskgd,btkd->bskgt", q * (1.0 / jnp.sqrt(d)), k)
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(causal[None, :, None, None, :], scores, -1e9)
    attn = jnp.einsum("bskgt,btkd->bskgd", jax.nn.softmax(scores, axis=-1), v)
    x = x + jnp.einsum("bskgd,kgde->bse", attn, p["o_proj"])
    h = plain_rms_norm(x, p["mlp_norm"])
    mlp = jax.nn.silu(h @ p["gate_proj"]) * (h @ p["up_proj"])
    return x + mlp @ p["down_proj"]


def plain_loss(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return jnp.mean(jnp.square(plain_block(p, x)))


# ---------------------------------------------------------------- measurement


def flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0]
    return float(analysis["flops"])


def hlo_instructions(compiled) -> int:
    """Instructions in the optimised program: a timing-free view of what the names compiled to."""
    return sum(
        1 for line in compiled.as_text().splitlines() if " = " in line and not line.lstrip().startswith("//")
    )


def layout_ops(compiled) -> dict[str, int]:
    """How many transposes, copies and broadcasts the optimised program still has (where names could cost)."""
    counts = dict.fromkeys(("transpose", "copy", "broadcast"), 0)
    for line in compiled.as_text().splitlines():
        found = re.search(r" = .*?\b(transpose|copy|broadcast)\(", line)
        if found:
            counts[found.group(1)] += 1
    return counts


def best_step_time(step, args, reps: int) -> float:
    """The fastest of ``reps`` steps: interference from other processes only ever adds time."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(step(*args))
        times.append(time.perf_counter() - start)
    return min(times)


def compile_both(mesh_kind: str | None):
    """The named and the plain fwd+bwd steps with their arguments and compiled programs, for one setting.

    A step is what a user calls: the compiled program itself for ``jax.jit``, the ``named_jit`` wrapper
    (which compiles once and then calls the cached program) for the named side on a mesh."""
    block = NamedBlock.init(jax.random.PRNGKey(0))
    x = hax.random.normal(jax.random.PRNGKey(1), (Batch, Pos, Embed))
    params = plain_params(block)
    if mesh_kind is None:
        named = jax.jit(jax.value_and_grad(named_loss)).lower(block, x).compile()
        plain = jax.jit(jax.value_and_grad(plain_loss)).lower(params, x.array).compile()
        return named, named, (block, x), plain, (params, x.array)
    kind = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}[mesh_kind]
    mesh = jax.make_mesh((MESH_DEVICES,), ("data",), axis_types=(kind,))
    mapping = {Batch.name: "data"}
    with jax.set_mesh(mesh):
        block, x = hax.shard(block, mapping), hax.shard(x, mapping)
        named_step = hax.named_jit(jax.value_and_grad(named_loss), mapping)
        named = named_step.lower(block, x).compile()
        jax.block_until_ready(named_step(block, x))  # compiles the wrapper's cached program
        plain_x = jax.device_put(x.array, NamedSharding(mesh, PartitionSpec("data")))
        params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
        plain = jax.jit(jax.value_and_grad(plain_loss)).lower(params, plain_x).compile()
    return named_step, named, (block, x), plain, (params, plain_x)


def measure(setting: str, mesh_kind: str | None, trials: int, reps: int) -> None:
    named_step, named_compiled, named_args, plain_step, plain_args = compile_both(mesh_kind)

    (named_value, named_grads), (plain_value, plain_grads) = named_step(*named_args), plain_step(*plain_args)
    named_leaves = jax.tree_util.tree_leaves(plain_params(named_grads))
    plain_leaves = jax.tree_util.tree_leaves(plain_grads)
    grad_diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(named_leaves, plain_leaves, strict=True))

    ratios, named_times, plain_times = [], [], []
    for trial in range(trials):
        # Alternate which side goes first so neither always runs on a warmer (or noisier) machine.
        sides = [(named_step, named_args, named_times), (plain_step, plain_args, plain_times)]
        for step, step_args, times in sides if trial % 2 == 0 else sides[::-1]:
            times.append(best_step_time(step, step_args, reps))
        ratios.append(named_times[-1] / plain_times[-1])

    low, _, high = statistics.quantiles(ratios, n=4)
    named_flops, plain_flops = flops(named_compiled), flops(plain_step)
    print(f"== {setting}")
    print(f"compiled FLOPs  haliax-lite: {named_flops:.6g}  plain jnp: {plain_flops:.6g}")
    print(f"FLOPs equal: {named_flops == plain_flops}  haliax-lite not more: {named_flops <= plain_flops}")
    named_hlo, plain_hlo = hlo_instructions(named_compiled), hlo_instructions(plain_step)
    print(f"optimised HLO instructions  haliax-lite: {named_hlo}  plain jnp: {plain_hlo}")
    named_ops, plain_ops = layout_ops(named_compiled), layout_ops(plain_step)
    print(f"transposes/copies/broadcasts  haliax-lite: {named_ops}  plain jnp: {plain_ops}")
    print(f"collectives  haliax-lite: {collectives(named_compiled)}  plain jnp: {collectives(plain_step)}")
    loss_diff = abs(float(named_value) - float(plain_value))
    print(f"max |difference|  loss: {loss_diff:.3g}  gradients: {grad_diff:.3g}")
    named_ms, plain_ms = statistics.median(named_times) * 1e3, statistics.median(plain_times) * 1e3
    print(f"median of best step times  haliax-lite: {named_ms:.2f} ms  plain jnp: {plain_ms:.2f} ms")
    print(
        f"time ratio haliax-lite / plain, median of {trials} alternating pairs:"
        f" {statistics.median(ratios):.4f} (quartiles {low:.4f} .. {high:.4f})"
    )


def collectives(compiled) -> dict[str, int]:
    """How many of each cross-device operation the optimised program has."""
    counts: dict[str, int] = {}
    pattern = r"= .*?\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\("
    for line in compiled.as_text().splitlines():
        found = re.search(pattern, line)
        if found:
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return counts


SETTINGS = {"none": None, "auto": "auto", "explicit": "explicit"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=21, help="alternating timing pairs (at least 2)")
    parser.add_argument("--reps", type=int, default=3, help="steps per timing (the fastest counts)")
    parser.add_argument(
        "--meshes",
        nargs="+",
        choices=sorted(SETTINGS),
        default=["none", "auto", "explicit"],
        help="settings to measure: one device, or the batch split over an auto or explicit mesh",
    )
    args = parser.parse_args()
    if args.trials < 2 or args.reps < 1:
        parser.error("--trials must be at least 2 and --reps at least 1")
    if len(jax.devices()) < MESH_DEVICES and set(args.meshes) - {"none"}:
        parser.error(f"the mesh settings need {MESH_DEVICES} devices, found {len(jax.devices())}")
    device = f"{jax.devices()[0].platform} x{jax.device_count()}"
    print(
        f"block: batch={Batch.size} seq={Pos.size} embed={Embed.size} heads={KVHeads.size}x{QPerKV.size}"
        f" head_size={HeadSize.size} mlp={Mlp.size}; devices: {device}"
    )
    for name in args.meshes:
        setting = (
            "one device" if SETTINGS[name] is None else f"batch over a {MESH_DEVICES}-device {name} mesh"
        )
        measure(setting, SETTINGS[name], args.trials, args.reps)


if __name__ == "__main__":
    main()
