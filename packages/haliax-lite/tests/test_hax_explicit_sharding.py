"""Named axes on JAX's explicit sharding (sharding in types): on 8 fake CPU devices, a Llama block compiles
to the same collectives under an explicit mesh as under an auto one, and named ops keep their operands'
shardings in the types they produce (no broadcast materialized replicated, no extra resharding)."""

import collections
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, PartitionSpec

import haliax_lite as hax
import haliax_lite.nn as hnn

Batch, Pos, Embed = hax.Axis("batch", 8), hax.Axis("position", 16), hax.Axis("embed", 32)
KPos = Pos.alias("key_position")
KVHeads, QPerKV, HeadSize, Mlp = (
    hax.Axis("kv_heads", 2),
    hax.Axis("q_per_kv", 2),
    hax.Axis("head_size", 8),
    hax.Axis("mlp", 64),
)


class LlamaBlock(eqx.Module):
    attn_norm: hnn.RmsNorm
    q: hnn.Linear
    k: hnn.Linear
    v: hnn.Linear
    o: hnn.Linear
    mlp_norm: hnn.RmsNorm
    gate: hnn.Linear
    up: hnn.Linear
    down: hnn.Linear

    @staticmethod
    def init(key):
        k = jax.random.split(key, 7)
        heads = (KVHeads, QPerKV, HeadSize)
        return LlamaBlock(
            hnn.RmsNorm.init(Embed, use_bias=False),
            hnn.Linear.init(Embed, heads, key=k[0], use_bias=False),
            hnn.Linear.init(Embed, (KVHeads, HeadSize), key=k[1], use_bias=False),
            hnn.Linear.init(Embed, (KVHeads, HeadSize), key=k[2], use_bias=False),
            hnn.Linear.init(heads, Embed, key=k[3], use_bias=False),
            hnn.RmsNorm.init(Embed, use_bias=False),
            hnn.Linear.init(Embed, Mlp, key=k[4], use_bias=False),
            hnn.Linear.init(Embed, Mlp, key=k[5], use_bias=False),
            hnn.Linear.init(Mlp, Embed, key=k[6], use_bias=False),
        )

    def __call__(self, x):
        h = self.attn_norm(x)
        q = self.q(h)
        k = self.k(h).rename({Pos.name: KPos.name})
        v = self.v(h).rename({Pos.name: KPos.name})
        scores = hax.dot(q * (1.0 / HeadSize.size**0.5), k, axis=HeadSize)
        weights = hnn.softmax(hax.where(hnn.attention.causal_mask(Pos, KPos), scores, -1e9), axis=KPos)
        x = x + self.o(hax.dot(weights, v, axis=KPos))
        h = self.mlp_norm(x)
        return x + self.down(hnn.silu(self.gate(h)) * self.up(h))


def loss(block, x):
    return hax.mean(hax.square(block(x))).scalar()


MAPPINGS = {
    "data": {"batch": "data"},
    "data_and_model": {"batch": "data", "mlp": "model", "kv_heads": "model"},
}
_COLLECTIVE = re.compile(
    r"= .*?\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\("
)


def collectives(compiled) -> dict[str, int]:
    counts = collections.Counter()
    for line in compiled.as_text().splitlines():
        found = _COLLECTIVE.search(line)
        if found:
            counts[found.group(1)] += 1
    return dict(counts)


def _compile(kind, mapping):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind, kind))
    block = LlamaBlock.init(jax.random.PRNGKey(0))
    x = hax.random.normal(jax.random.PRNGKey(1), (Batch, Pos, Embed))
    with jax.set_mesh(mesh):
        block, x = hax.shard(block, mapping), hax.shard(x, mapping)
        step = hax.named_jit(jax.value_and_grad(loss), mapping)
        compiled = step.lower(block, x).compile()
        value, grads = step(block, x)
    return compiled, value, grads


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_the_llama_block_compiles_to_the_same_collectives_under_explicit_and_auto_meshes(name):
    auto, auto_value, auto_grads = _compile(AxisType.Auto, MAPPINGS[name])
    explicit, explicit_value, explicit_grads = _compile(AxisType.Explicit, MAPPINGS[name])
    assert collectives(explicit) == collectives(auto)
    assert "all-reduce" in collectives(explicit)  # the batch is split: parameter gradients are summed
    assert "all-gather" not in collectives(explicit)
    np.testing.assert_allclose(explicit_value, auto_value, rtol=1e-6)
    for a, e in zip(
        jax.tree_util.tree_leaves(auto_grads), jax.tree_util.tree_leaves(explicit_grads), strict=True
    ):
        np.testing.assert_allclose(np.asarray(e), np.asarray(a), rtol=1e-4, atol=1e-6)


def test_named_ops_keep_their_operands_shardings_in_the_type():
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
    seen = {}

    def f(x, scale, mask):
        y = hax.tanh(x) * scale  # scale (embed,) replicated, broadcast by name
        seen["product"] = jax.typeof(y.array).sharding.spec
        z = hax.where(mask, y, 0.0)  # mask (position,) replicated
        seen["where"] = jax.typeof(z.array).sharding.spec
        seen["clip"] = jax.typeof(hax.clip(z, -scale, scale).array).sharding.spec
        return hax.sum(z, ("position", "embed"))

    x = hax.random.normal(jax.random.PRNGKey(0), (Batch, Pos, Embed))
    with jax.set_mesh(mesh):
        x = hax.shard(x, {"batch": "data"})
        out = jax.jit(f)(x, hax.ones(Embed), hax.arange(Pos) > 3)
    expected = PartitionSpec("data", None, None)
    assert seen == {"product": expected, "where": expected, "clip": expected}
    assert out.array.sharding.spec == PartitionSpec("data")
    np.testing.assert_allclose(
        out.array,
        jnp.sum(jnp.where(jnp.arange(16)[:, None] > 3, jnp.tanh(x.array), 0.0), axis=(1, 2)),
        rtol=1e-5,
    )
