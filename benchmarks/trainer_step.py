"""Tokens/s of the trainer's jitted step against a hand-written plain-JAX step of the same model and optimizer
(the same kernels, optax chain, remat and dtypes).

The reference is what one would write without haliax-lite or config layers: a dict of arrays with the
layers stacked, `lax.scan` over them, `jnp.einsum` with hand-chosen layouts, `meltemi.kernels.attention`
and `cross_entropy`. Both
steps run alternately in one process on the same batches; the last line is `ratio: <ours / reference>`.

`--whole-rows` makes every row one document (no segment ids reach the attention kernel, so `auto` may pick
cuDNN), as a step that trains without document masking would; the shipped trainer always keeps documents
apart, so this is a measurement of the kernel's cost, not a setting. `--skip-reference` times the
trainer's step alone (half the time: for comparing settings of the trainer among themselves).

    uv run python benchmarks/trainer_step.py                      # configs/tiny.yaml on this machine
    uv run python benchmarks/trainer_step.py --config configs/llama_1b.yaml --rounds 5   # on a GPU
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.ad_checkpoint import checkpoint_name as tag

from meltemi import kernels
from meltemi.trainer import adapters
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import load_config
from meltemi.trainer.model.llama import remat_policy
from meltemi.trainer.model.rotary import inverse_frequencies
from meltemi.trainer.step.flops import flops_per_token, peak_flops_per_device
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.schedules import learning_rate_schedule
from meltemi.trainer.step.train_step import init_state, make_train_step


def reference_params(state) -> dict:
    """The trainer's initial weights as plain arrays, each in the layout the einsums below expect."""
    m = state.model
    layers = m.layers.stacked
    a, p = layers.self_attn, layers.mlp

    def raw(named, order):
        return jnp.array(named.rearrange(order).array, copy=True)  # the state is donated: no shared buffers

    return {
        "embed": raw(m.embed_tokens.weight, ("vocab", "embed")),
        "q": raw(a.q_proj.weight, ("layers", "embed", "kv_heads", "q_heads_per_group", "head_size")),
        "k": raw(a.k_proj.weight, ("layers", "embed", "kv_heads", "head_size")),
        "v": raw(a.v_proj.weight, ("layers", "embed", "kv_heads", "head_size")),
        "o": raw(a.o_proj.weight, ("layers", "kv_heads", "q_heads_per_group", "head_size", "embed")),
        "gate": raw(p.gate_proj.weight, ("layers", "embed", "mlp")),
        "up": raw(p.up_proj.weight, ("layers", "embed", "mlp")),
        "down": raw(p.down_proj.weight, ("layers", "mlp", "embed")),
        "norm1": raw(layers.input_layernorm.weight, ("layers", "embed")),
        "norm2": raw(layers.post_attention_layernorm.weight, ("layers", "embed")),
        "norm": raw(m.norm.weight, ("embed",)),
        "head": raw(m.unembedding(), ("embed", "vocab")),
    }


def reference_step(config: RunConfig):
    """A plain-JAX train step: same math, same kernels, same optimizer, no named axes."""
    mc, compute = config.model, jnp.dtype(config.trainer.compute_dtype)
    schedule = learning_rate_schedule(config.optimizer, config.trainer.num_train_steps)
    o = config.optimizer
    no_decay = {"embed", "norm", "norm1", "norm2"}
    optimizer = optax.chain(
        optax.clip_by_global_norm(o.max_grad_norm),
        optax.scale_by_adam(b1=o.beta1, b2=o.beta2, eps=o.epsilon),
        optax.add_decayed_weights(o.weight_decay, mask=lambda p: {k: k not in no_decay for k in p}),
        optax.scale_by_learning_rate(schedule),
    )
    policy = remat_policy(mc.remat)

    def rms(x, w):
        xf = x.astype(jnp.float32)
        return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + mc.norm_eps)).astype(x.dtype) * w

    def rotate(x, cos, sin):  # x: [b, s, ..., d]; cos/sin: [s, d]
        half = x.shape[-1] // 2
        rotated = jnp.concatenate([-x[..., half:], x[..., :half]], -1)
        shape = (1, cos.shape[0]) + (1,) * (x.ndim - 3) + (cos.shape[1],)
        return x * cos.reshape(shape).astype(x.dtype) + rotated * sin.reshape(shape).astype(x.dtype)

    def block(x, layer, cos, sin, segments):  # tagged as the trainer's model is, for `save_dots`
        h = rms(x, layer["norm1"])
        q = tag(rotate(jnp.einsum("bse,ekgd->bskgd", h, layer["q"]), cos, sin), "q")
        k = tag(rotate(jnp.einsum("bse,ekd->bskd", h, layer["k"]), cos, sin), "k")
        v = tag(jnp.einsum("bse,ekd->bskd", h, layer["v"]), "v")
        b, s, kv, g, d = q.shape
        att = kernels.attention(
            q.reshape(b, s, kv * g, d),
            k,
            v,
            segment_ids=segments,
            implementation=mc.attention,
            check_finite=False,
        ).reshape(b, s, kv, g, d)
        x = x + tag(jnp.einsum("bskgd,kgde->bse", tag(att, "attention"), layer["o"]), "attention_out")
        h = rms(x, layer["norm2"])
        gate = tag(jnp.einsum("bse,em->bsm", h, layer["gate"]), "gate")
        up = tag(jnp.einsum("bse,em->bsm", h, layer["up"]), "up")
        return x + tag(jnp.einsum("bsm,me->bse", jax.nn.silu(gate) * up, layer["down"]), "mlp_out")

    def loss_fn(params, batch):
        p = jax.tree_util.tree_map(lambda x: x.astype(compute), params)
        ids, targets, segments, mask = batch
        s = ids.shape[1]
        angles = jnp.arange(s, dtype=jnp.float32)[:, None] * inverse_frequencies(
            mc.head_size, mc.rope_theta, mc.rope_scaling
        )
        angles = jnp.concatenate([angles, angles], -1)
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        layer_names = ("q", "k", "v", "o", "gate", "up", "down", "norm1", "norm2")
        stacked = {n: p[n] for n in layer_names}

        def scan_body(x, layer):
            return block(x, layer, cos, sin, segments), None

        body = policy.checkpoint("carry", "input", scan_body)
        x, _ = jax.lax.scan(body, p["embed"][ids], stacked)
        x = rms(x, p["norm"])
        b = x.shape[0]
        loss, _ = kernels.cross_entropy(
            x.reshape(b * s, -1),
            p["head"],
            targets.reshape(-1),
            mask=mask.reshape(-1),
            z_loss_weight=mc.z_loss_weight,
            implementation=mc.cross_entropy,
            block_size=mc.cross_entropy_block_size,
            check_finite=False,
            check_labels=False,
        )
        return loss

    def gradients(params, batch):
        """The batch's loss and gradient, accumulated over ``trainer.microbatch_size`` rows at a time as the
        trainer accumulates them (microbatch ``i`` takes rows ``i, i + count, ...``; each weighed by its
        share of the trained targets). Without it this step would hold every row's activations at once:
        the 1B shape's 64 rows, not its 8, which is what asked for 604 GiB without remat."""
        micro, rows = config.trainer.microbatch_size, batch[0].shape[0]
        if micro is None or micro >= rows:
            return jax.value_and_grad(loss_fn)(params, batch)
        count = rows // micro

        def split(x):
            return x.reshape(micro, count, *x.shape[1:]).swapaxes(0, 1)

        total = batch[3].astype(jnp.float32).sum()

        def accumulate(carry, one):
            loss, grads = jax.value_and_grad(loss_fn)(params, one)
            share = one[3].astype(jnp.float32).sum() / total
            summed = jax.tree_util.tree_map(lambda a, g: a + share * g.astype(jnp.float32), carry[1], grads)
            return (carry[0] + share * loss, summed), None

        zeros = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        (loss, grads), _ = jax.lax.scan(accumulate, (jnp.float32(0), zeros), tuple(map(split, batch)))
        return loss, grads

    def step(params, opt_state, batch):
        loss, grads = gradients(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return optimizer, jax.jit(step, donate_argnums=(0, 1))


def batches(
    config: RunConfig, count: int, rows: int, whole_rows: bool = False
) -> list[dict[str, np.ndarray]]:
    """Random token batches with several documents per row, as the token store would give (or one document
    per row: ``whole_rows``)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        shape = (rows, config.data.seq_len)
        segments = np.cumsum(rng.random(shape) < 4 / config.data.seq_len, axis=1).astype(np.int32)
        if whole_rows:
            segments = np.zeros(shape, np.int32)
        out.append(
            {
                "input_ids": rng.integers(0, config.model.vocab_size, shape, dtype=np.int32),
                "targets": rng.integers(0, config.model.vocab_size, shape, dtype=np.int32),
                "segment_ids": segments,
                "loss_mask": np.ones(shape, bool),
                "source": np.zeros(rows, np.int32),
            }
        )
    return out


def attend_whole_rows() -> None:
    """Make every ``meltemi.kernels.attention`` call in this process drop its segment ids, in the trainer's
    model and in the reference alike: each row is then one causal sequence, and ``auto`` chooses as for
    whole rows (cuDNN on a GPU). For this benchmark's ``--whole-rows`` only."""
    attention = kernels.attention

    def whole_rows(*args, segment_ids=None, **kwargs):
        return attention(*args, **kwargs)

    kernels.attention = whole_rows


def memory_plans(config: RunConfig, plan: MeshPlan, rows: int) -> None:
    """Both steps compiled from abstract shapes (nothing allocated: the 1B shape's state alone is 15 GiB)
    and XLA's memory plan for each printed."""
    with jax.set_mesh(plan.mesh):
        key = jax.eval_shape(lambda: adapters.jax_key(config.trainer.seed, "init"))
        state = jax.eval_shape(lambda k: init_state(config, k), key)
        params = jax.eval_shape(reference_params, state)
        optimizer, ref_step = reference_step(config)
        opt_state = jax.eval_shape(optimizer.init, params)
        shape = (rows, config.data.seq_len)
        host = {
            name: jax.ShapeDtypeStruct(shape, jnp.int32) for name in ("input_ids", "targets", "segment_ids")
        }
        host |= {
            "positions": jax.ShapeDtypeStruct(shape, jnp.int32),
            "loss_mask": jax.ShapeDtypeStruct(shape, bool),
        }
        host["source"] = jax.ShapeDtypeStruct(shape[:1], jnp.int32)
        named = jax.eval_shape(adapters.named_batch, host)
        plain = (host["input_ids"], host["targets"], host["segment_ids"], host["loss_mask"])
        programs = {
            "trainer step": jax.jit(make_train_step(config), donate_argnums=0).lower(state, named),
            "plain JAX step": ref_step.lower(params, opt_state, plain),
        }
        for name, lowered in programs.items():
            m = lowered.compile().memory_analysis()
            print(
                f"{name}: arguments {m.argument_size_in_bytes / 2**30:.2f} GiB, temporaries "
                f"{m.temp_size_in_bytes / 2**30:.2f} GiB (remat {config.model.remat}, microbatch "
                f"{config.trainer.microbatch_size}, batch {rows} x {config.data.seq_len}; XLA:"
                f"{jax.devices()[0].platform}'s plan)"
            )


def reference_run(config: RunConfig, state, data: list[dict[str, np.ndarray]]) -> Callable[[], None]:
    """The plain-JAX step, compiled, from the trainer's initial weights: a function that runs it once over
    ``data`` (keeping its parameters and optimizer state between calls) and waits for the last loss."""
    params = reference_params(state)
    optimizer, ref_step = reference_step(config)
    opt_state = optimizer.init(params)
    plain = [(b["input_ids"], b["targets"], b["segment_ids"], b["loss_mask"]) for b in data]
    compiled = ref_step.lower(params, opt_state, plain[0]).compile()

    def run() -> None:
        nonlocal params, opt_state
        for b in plain:
            params, opt_state, loss = compiled(params, opt_state, b)
        jax.block_until_ready(loss)

    return run


def timed_rounds(runs: dict[str, Callable[[], None]], rounds: int, steps: int) -> dict[str, float]:
    """Median seconds per step of each run (``steps`` steps a call), alternated round by round after one
    warm-up call each."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - started) / steps)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of the two steps")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round and implementation")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="compile both steps and print XLA's memory plan for each, without running them",
    )
    parser.add_argument(
        "--whole-rows",
        action="store_true",
        help="one document per row: attention without segment ids (cuDNN on a GPU), both steps",
    )
    parser.add_argument(
        "--skip-reference", action="store_true", help="time the trainer's step only (no plain-JAX step)"
    )
    args, overrides = parser.parse_known_args()
    config = load_config(args.config, ["--trainer.mesh.data", "1", *overrides])
    plan = MeshPlan.of(config, jax.devices()[:1])
    rows = config.trainer.batch_sizes()[0]
    if args.whole_rows:
        attend_whole_rows()
    if args.memory_only:
        memory_plans(config, plan, rows)
        return
    data = batches(config, args.steps, rows, whole_rows=args.whole_rows)

    with jax.set_mesh(plan.mesh):
        state = jax.jit(lambda k: init_state(config, k))(adapters.jax_key(config.trainer.seed, "init"))
        named = [adapters.named_batch(b) for b in data]
        started = time.perf_counter()
        compiled = jax.jit(make_train_step(config), donate_argnums=0).lower(state, named[0]).compile()
        compile_seconds = time.perf_counter() - started
        memory = compiled.memory_analysis()

        def run_ours():
            nonlocal state
            for b in named:
                state, metrics = compiled(state, b)
            jax.block_until_ready(metrics.loss)

        runs = {"trainer": run_ours}
        if not args.skip_reference:
            runs["reference"] = reference_run(config, state, data)
        seconds = timed_rounds(runs, args.rounds, args.steps)

    tokens = rows * config.data.seq_len
    ours_tps = tokens / seconds["trainer"]
    flops = flops_per_token(config.model, config.data.seq_len) * ours_tps
    peak = peak_flops_per_device()
    print(
        f"device: {jax.devices()[0].device_kind}; config {args.config}; batch {rows} x {config.data.seq_len}"
        + ("; whole rows (no segment ids)" if args.whole_rows else "")
    )
    print(f"compile: {compile_seconds:.1f} s")
    print(
        f"compiled memory per device: arguments {memory.argument_size_in_bytes / 2**20:.1f} MiB, "
        f"temporaries {memory.temp_size_in_bytes / 2**20:.1f} MiB"
    )
    print(f"trainer step:   {ours_tps:,.0f} tokens/s ({seconds['trainer'] * 1e3:.1f} ms/step)")
    if "reference" in seconds:
        ref_tps = tokens / seconds["reference"]
        print(f"plain JAX step: {ref_tps:,.0f} tokens/s ({seconds['reference'] * 1e3:.1f} ms/step)")
    else:
        print("plain JAX step: not measured (--skip-reference)")
    print(f"model FLOP/s: {flops / 1e9:.1f} G" + (f"; MFU {flops / peak:.1%}" if peak else ""))
    if "reference" in seconds:
        print(f"ratio: {ours_tps / ref_tps:.2f}")
    else:
        print("ratio: not measured (--skip-reference)")


if __name__ == "__main__":
    main()
