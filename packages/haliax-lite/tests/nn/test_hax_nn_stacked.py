"""``Stacked`` (scanned) equals ``BlockSeq`` (unrolled); every checkpoint policy gives the same gradients."""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name

import haliax_lite as hax
import haliax_lite.nn as hnn

Layers, Batch = hax.Axis("layers", 4), hax.Axis("batch", 2)
Embed, Mlp = hax.Axis("embed", 6), hax.Axis("mlp", 5)


class Block(eqx.Module):
    norm: hnn.RmsNorm
    up: hnn.Linear
    down: hnn.Linear

    @classmethod
    def init(cls, Embed: hax.Axis, Mlp: hax.Axis, *, key):
        key_up, key_down = jax.random.split(key)
        return cls(
            hnn.RmsNorm.init(Embed, use_bias=False),
            hnn.Linear.init(Embed, Mlp, key=key_up),
            hnn.Linear.init(Mlp, Embed, key=key_down),
        )

    def __call__(self, x, layer_scale, shift):
        hidden = jax.tree_util.tree_map(lambda a: checkpoint_name(a, "mlp_hidden"), self.up(self.norm(x)))
        return x + layer_scale * self.down(hnn.gelu(hidden)) + shift


class PairBlock(Block):
    """Returns ``(carry, output)``, for ``scan``."""

    def __call__(self, x, layer_scale, shift):
        y = super().__call__(x, layer_scale, shift)
        return y, hax.sum(y, Embed)


@functools.cache
def build(cls, module=Block, policy=False):
    keys = jax.random.split(jax.random.PRNGKey(0), Layers.size)
    return cls.init(Layers, module, gradient_checkpointing=policy)(Embed, Mlp, key=keys)


def with_policy(module, policy):
    """The same blocks under another checkpoint policy (building them again would only cost time)."""
    policy = hnn.ScanCheckpointPolicy.from_bool_or_str(policy)
    return dataclasses.replace(module, gradient_checkpointing=policy)


def inputs():
    rng = np.random.default_rng(1)
    x = hax.named(rng.normal(size=(Batch.size, Embed.size)).astype(np.float32), (Batch, Embed))
    layer_scale = hax.named(jnp.array([1.0, 0.5, -0.25, 2.0]), Layers)  # one per block: sliced
    shift = hax.named(rng.normal(size=Embed.size).astype(np.float32) * 0.1, Embed)  # no Layers axis: shared
    return x, layer_scale, shift


def assert_trees_close(a, b, rtol=1e-6, atol=1e-6, msg=""):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b), msg
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol, err_msg=msg)


def sequential_reference(blocks, x, layer_scale, shift):
    for i, block in enumerate(blocks):
        x = block(x, layer_scale[Layers.name, i], shift)
    return x


def test_stacked_and_blockseq_init_draw_the_same_blocks_as_per_block_init():
    stacked, seq = build(hnn.Stacked), build(hnn.BlockSeq)
    assert stacked.stacked.up.weight.axes[0] == Layers
    keys = jax.random.split(jax.random.PRNGKey(0), Layers.size)
    one_by_one = [Block.init(Embed, Mlp, key=k) for k in keys]
    assert_trees_close(stacked.unstacked(), one_by_one, rtol=0, atol=0)
    assert_trees_close(seq.unstacked(), one_by_one, rtol=0, atol=0)


def test_fold_equals_blockseq_and_the_python_loop():
    stacked, seq = build(hnn.Stacked), build(hnn.BlockSeq)
    x, layer_scale, shift = inputs()

    @jax.jit  # one program: eagerly each block's every operation compiled on its own (0.9 -> 0.35 CPU-s)
    def run(stacked, seq, x, layer_scale, shift):
        expected = sequential_reference(seq.blocks, x, layer_scale, shift)
        outs = [module.fold(x, layer_scale, shift) for module in (stacked, seq)]
        via = stacked.fold_via(lambda block, carry, s: block(carry, s, shift))(x, layer_scale)
        return [out.rearrange(x.axes).array for out in (expected, *outs, via)]

    expected, *outs = run(stacked, seq, x, layer_scale, shift)
    for out in outs:  # Stacked's fold, BlockSeq's and fold_via
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_scan_stacks_each_blocks_output_along_the_block_axis():
    stacked, seq = build(hnn.Stacked, PairBlock), build(hnn.BlockSeq, PairBlock)
    x, layer_scale, shift = inputs()
    # one program for both modules and the first block, not each operation compiled eagerly
    results, (_, first_output) = jax.jit(
        lambda modules, x, layer_scale, shift: (
            [module.scan(x, layer_scale, shift) for module in modules],
            modules[1].blocks[0](x, layer_scale[Layers.name, 0], shift),
        )
    )((stacked, seq), x, layer_scale, shift)
    for _, outputs in results:
        assert set(outputs.axes) == {Layers, Batch}
    assert_trees_close(
        [(c.rearrange(x.axes), o.rearrange((Layers, Batch))) for c, o in results[:1]],
        [(c.rearrange(x.axes), o.rearrange((Layers, Batch))) for c, o in results[1:]],
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_allclose(results[0][1][Layers.name, 0].array, first_output.array, rtol=1e-5, atol=1e-6)


def test_scan_via_and_vmap_agree_between_stacked_and_blockseq():
    stacked, seq = build(hnn.Stacked), build(hnn.BlockSeq)
    x, layer_scale, shift = inputs()
    step = lambda block, carry, s: (block(carry, s, shift), hax.mean(carry))  # noqa: E731

    @jax.jit  # one program for all of them, not each operation compiled eagerly
    def run(modules, x, layer_scale):
        vmapped = [m.vmap(x, layer_scale, shift).rearrange((Layers, Batch, Embed)) for m in modules]
        first = modules[1].blocks[0](x, layer_scale[Layers.name, 0], shift).rearrange((Batch, Embed))
        scanned = [m.scan_via(step)(x, layer_scale) for m in modules]
        scanned = [(c.rearrange(x.axes), o.rearrange((Layers,))) for c, o in scanned]
        summed = [m.vmap_via(lambda block: hax.sum(block.up.weight))() for m in modules]
        return vmapped, first, scanned, summed

    vmapped, expected_first, scanned, outputs = run((stacked, seq), x, layer_scale)
    assert_trees_close(vmapped[0], vmapped[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vmapped[0][Layers.name, 0].array, expected_first.array, rtol=1e-5, atol=1e-6)
    assert_trees_close(scanned[:1], scanned[1:], rtol=1e-5, atol=1e-6)
    assert_trees_close(outputs[0].array, outputs[1].array, rtol=1e-5, atol=1e-6)


SCAN_POLICIES = [
    True,
    "full",
    "recompute",
    "save_all",
    "nested",
    "offload",
    hnn.ScanCheckpointPolicy(save_carries=False, save_inputs=False, save_block_internals=("mlp_hidden",)),
    hnn.ScanCheckpointPolicy(save_inputs=False, offload_block_internals=("mlp_hidden",)),
    hnn.ScanCheckpointPolicy(nested=2, save_carries=False),
]
# Unrolled, a nested policy has no outer scan to split and True equals "full": the distinct cases remain.
UNROLLED_POLICIES = [True, "recompute", "save_all", "offload", SCAN_POLICIES[6]]


def loss(module, x, layer_scale, shift):
    return hax.sum(hax.square(module.fold(x, layer_scale, shift))).scalar()


@pytest.mark.parametrize(
    "cls, policies",
    [(hnn.Stacked, SCAN_POLICIES), (hnn.BlockSeq, UNROLLED_POLICIES)],
    ids=["Stacked", "BlockSeq"],
)
def test_every_checkpoint_policy_gives_the_same_gradients(cls, policies):
    x, layer_scale, shift = inputs()
    modules = [build(hnn.Stacked)] + [with_policy(build(cls), policy) for policy in policies]

    @jax.jit  # one compilation for all policies: each is a separate subprogram
    def all_gradients(modules, x, layer_scale, shift):
        return [jax.grad(loss, argnums=(0, 1))(m, x, layer_scale, shift) for m in modules]

    baseline, *others = all_gradients(modules, x, layer_scale, shift)
    baseline = (baseline[0].unstacked(), baseline[1])
    for policy, grads in zip(policies, others, strict=True):
        assert_trees_close((grads[0].unstacked(), grads[1]), baseline, rtol=1e-5, atol=1e-6, msg=str(policy))


@pytest.mark.parametrize("cls", [hnn.Stacked, hnn.BlockSeq], ids=["Stacked", "BlockSeq"])
def test_checkpoint_policies_rematerialise_and_no_checkpointing_does_not(cls):
    x, layer_scale, shift = inputs()

    def jaxpr_text(policy):
        return str(jax.make_jaxpr(jax.grad(loss))(with_policy(build(cls), policy), x, layer_scale, shift))

    unchecked = jaxpr_text(False)  # traced once for both checks
    assert "checkpoint" not in unchecked and "remat" not in unchecked
    for policy in (True, "full", "save_all"):
        text = jaxpr_text(policy)
        assert "checkpoint" in text or "remat" in text, policy


def test_unknown_policy_and_deprecated_prevent_cse():
    with pytest.raises(ValueError, match="sometimes"):
        hnn.Stacked.init(Layers, Block, gradient_checkpointing="sometimes")
    with pytest.warns(DeprecationWarning, match="prevent_cse"):
        made = hnn.BlockSeq.init(Layers, Block, gradient_checkpointing=True, prevent_cse=True)
    keys = jax.random.split(jax.random.PRNGKey(0), Layers.size)
    assert made(Embed, Mlp, key=keys).gradient_checkpointing.prevent_cse is True


def test_unstacked_blocks_rebuild_an_equivalent_blockseq():
    stacked = build(hnn.Stacked)
    seq = hnn.BlockSeq(list(stacked.unstacked()), Layers, stacked.gradient_checkpointing)
    x, layer_scale, shift = inputs()
    folded = jax.jit(  # one program, not each operation compiled eagerly
        lambda modules, *args: [m.fold(*args).rearrange(x.axes).array for m in modules]
    )((seq, stacked), x, layer_scale, shift)
    np.testing.assert_allclose(folded[0], folded[1], rtol=1e-5, atol=1e-6)
    assert len(stacked.unstacked()) == Layers.size
