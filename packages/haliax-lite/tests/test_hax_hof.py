"""vmap, scan, fold and map over named axes equal their positional programs; every remat policy gives the
same gradients as no remat."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

import haliax_lite as hax

Batch, Embed, Time = hax.Axis("batch", 3), hax.Axis("embed", 4), hax.Axis("time", 6)
RNG = np.random.default_rng(0)
X = hax.NamedArray(jnp.asarray(RNG.normal(size=(6, 3, 4)).astype(np.float32)), (Time, Batch, Embed))
W = hax.NamedArray(jnp.asarray(RNG.normal(size=(4, 4)).astype(np.float32) / 2), (Embed, Embed.alias("out")))


def test_vmap_over_a_named_axis_moves_it_to_the_front():
    def per_batch(x):
        assert Batch.name not in x.shape
        return hax.sum(x, "embed"), jnp.float32(1.0)

    summed, ones = hax.vmap(per_batch, Batch)(X)
    assert summed.axes == (Batch, Time) and ones.shape == (3,)
    np.testing.assert_allclose(np.asarray(summed.array), np.asarray(X.array).sum(-1).T, rtol=1e-6)


def test_vmap_unnamed_arrays_default_to_axis_zero_and_specs_override():
    keys = jax.random.split(jax.random.PRNGKey(0), Batch.size)
    draws = hax.vmap(lambda k: hax.random.normal(k, Embed), Batch)(keys)
    assert draws.axes == (Batch, Embed)
    np.testing.assert_allclose(np.asarray(draws.array[1]), np.asarray(jax.random.normal(keys[1], (4,))))
    bias = jnp.arange(4.0)
    shared = hax.vmap(lambda x, b: x + b, Batch, args=(0, None))(hax.zeros((Batch, Embed)), bias)
    np.testing.assert_allclose(np.asarray(shared.array), np.tile(np.arange(4.0), (3, 1)))
    both = hax.vmap(lambda x: hax.sum(x), ("time", "batch"))(X)
    assert both.axes == (Time, Batch)


def test_vmap_errors():
    with pytest.raises(ValueError, match="Cannot infer the size"):
        hax.vmap(lambda x: x, "nope")(3.0)
    with pytest.raises(ValueError, match="has size 3"):
        hax.vmap(lambda x, y: x, Batch)(hax.zeros(Batch), hax.zeros(Batch.resize(5)))


def step(carry, x):
    h = hax.tanh(hax.dot(carry + x, W, axis="embed").rename({"out": "embed"}))
    h = hax.tree_checkpoint_name(h, "h")
    return h * 0.5 + carry * 0.5, hax.sum(h, "embed")


def positional_step(carry, x):
    h = jnp.tanh((carry + x) @ W.array)
    return h * 0.5 + carry * 0.5, h.sum(-1)


def test_scan_equals_lax_scan():
    init = hax.zeros((Batch, Embed))
    carry, ys = hax.scan(step, Time)(init, X)
    p_carry, p_ys = jax.lax.scan(positional_step, jnp.zeros((3, 4)), X.array)
    assert carry.axes == (Batch, Embed) and ys.axes == (Time, Batch)
    np.testing.assert_allclose(np.asarray(carry.array), np.asarray(p_carry), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ys.array), np.asarray(p_ys), rtol=1e-5)
    moved = hax.rearrange(X, ("batch", "embed", "time"))
    carry2, _ = hax.scan(step, "time")(init, moved)
    np.testing.assert_allclose(np.asarray(carry2.array), np.asarray(p_carry), rtol=1e-5)
    back, _ = hax.scan(step, Time, reverse=True)(init, X)
    p_back, _ = jax.lax.scan(positional_step, jnp.zeros((3, 4)), X.array, reverse=True)
    np.testing.assert_allclose(np.asarray(back.array), np.asarray(p_back), rtol=1e-5)


def test_fold_map_and_unscanned_arguments():
    total = hax.fold(lambda c, x, scale: c + x * scale, Time)(hax.zeros((Batch, Embed)), X, 2.0)
    np.testing.assert_allclose(np.asarray(total.array), 2 * np.asarray(X.array).sum(0), rtol=1e-5)
    constant = hax.ones(Embed)
    mapped = hax.map(lambda x, c: hax.dot(x, c, axis="embed"), Time)(X, constant)
    assert mapped.axes == (Time, Batch)
    np.testing.assert_allclose(np.asarray(mapped.array), np.asarray(X.array).sum(-1), rtol=1e-5)
    _, nothing = hax.scan(lambda c, _: (c + 1, None), Time)(0, None)
    assert nothing is None


POLICIES = [
    False,
    True,
    "full",
    "recompute",
    "save_all",
    "nested",
    "offload",
    hax.ScanCheckpointPolicy(save_block_internals=["h"]),
    hax.ScanCheckpointPolicy(nested=3, save_carries=False),
    hax.ScanCheckpointPolicy(simple=True, prevent_cse=True),
    hax.ScanCheckpointPolicy(offload_block_internals=["h"]),
]


@pytest.fixture(scope="module")
def reference_grads():
    def loss(x, w):
        carry, ys = jax.lax.scan(
            lambda c, x: (jnp.tanh((c + x) @ w) * 0.5 + c * 0.5, None), jnp.zeros((3, 4)), x
        )
        return jnp.sum(carry**2)

    return jax.grad(loss, argnums=(0, 1))(X.array, W.array)


@pytest.mark.parametrize("remat", POLICIES, ids=str)
def test_every_remat_policy_gives_the_positional_gradients(remat, reference_grads):
    def loss(x, w):
        def block(c, x):
            h = hax.tanh(hax.dot(c + x, w, axis="embed").rename({"out": "embed"}))
            return hax.tree_checkpoint_name(h, "h") * 0.5 + c * 0.5

        return hax.sum(hax.fold(block, Time, remat=remat)(hax.zeros((Batch, Embed)), x) ** 2).scalar()

    gx, gw = eqx.filter_jit(jax.grad(loss, argnums=(0, 1)))(X, W)
    np.testing.assert_allclose(np.asarray(gx.array), np.asarray(reference_grads[0]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gw.array), np.asarray(reference_grads[1]), rtol=1e-5, atol=1e-6)


SIXTEEN = hax.Axis("step", 16)


def _saved_residuals(remat, capsys) -> list[str]:
    def loss(w):
        def block(c, _):
            a = hax.sin(hax.dot(c, w, axis="embed").rename({"out": "embed"}))
            return hax.cos(hax.tree_checkpoint_name(a, "a")) * c

        return hax.sum(hax.fold(block, SIXTEEN, remat=remat)(hax.ones(Embed), None)).scalar()

    capsys.readouterr()
    print_saved_residuals(loss, W)
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("remat", "per_step_residuals"),
    [
        (False, 4),  # everything the backward pass needs, for each of the 16 steps
        ("save_all", 4),
        (True, 1),  # only the carries; the block is recomputed
        (hax.ScanCheckpointPolicy(save_block_internals=["a"]), 2),  # carries and the tagged value
    ],
    ids=str,
)
def test_policies_choose_what_each_step_saves(remat, per_step_residuals, capsys):
    per_step = [line for line in _saved_residuals(remat, capsys) if line.startswith("f32[16,4]")]
    assert len(per_step) == per_step_residuals


def test_nested_remat_keeps_about_sqrt_n_carries(capsys):
    lines = _saved_residuals("nested", capsys)
    assert not any(line.startswith("f32[16,") for line in lines)
    assert any(line.startswith("f32[4,4]") for line in lines if "output" in line)


def test_policy_parsing_and_errors():
    P = hax.ScanCheckpointPolicy
    assert P.from_bool_or_str(True) == P(simple=True)  # Haliax's classic behaviour
    assert P.from_bool_or_str(False).disable
    assert P.from_bool_or_str("recompute") == P(save_carries=False, save_inputs=False)
    assert P.from_bool_or_str("full") == P.from_bool_or_str("recompute")
    assert P().save_inputs is False  # Haliax's default
    with pytest.raises(ValueError, match="cannot apply; list the names to save"):
        P(save_block_internals=True, offload_block_internals=["x"])
    assert P.from_bool_or_str("offload").save_carries == "offload"
    with pytest.raises(ValueError, match="Unknown remat"):
        P.from_bool_or_str("sometimes")
    with pytest.raises(ValueError, match="nested"):
        P(nested=0)
    with pytest.raises(ValueError, match="save_carries"):
        P(save_carries="disk")
    with pytest.raises(ValueError, match="does not divide"):
        hax.fold(lambda c, x: c + x, Time, remat=P(nested=4))(hax.zeros(Batch), hax.zeros((Time, Batch)))


class _Block(eqx.Module):
    weight: hax.NamedArray
    activation: object
    width: int

    def __init__(self, key):
        self.weight = hax.random.normal(key, Embed)
        self.activation = hax.tanh
        self.width = Embed.size


def test_modules_with_non_array_fields_go_through_vmap_and_scan():
    Layer = hax.Axis("layer", 3)
    keys = jax.random.split(jax.random.PRNGKey(0), Layer.size)
    blocks = hax.vmap(_Block, Layer)(keys)
    assert blocks.weight.axes == (Layer, Embed) and blocks.activation is hax.tanh and blocks.width == 4
    third = jax.random.normal(keys[2], (4,))
    np.testing.assert_allclose(np.asarray(blocks.weight.array[2]), np.asarray(third))

    def apply(x, block):
        return block.activation(x + block.weight), (block.width, block.weight)

    out, (widths, weights) = hax.scan(apply, Layer)(hax.zeros(Embed), blocks)
    expected = jnp.zeros(4)
    for i in range(3):
        expected = jnp.tanh(expected + blocks.weight.array[i])
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(expected), rtol=1e-6)
    assert widths == 4 and weights.axes == (Layer, Embed)


@pytest.mark.parametrize("remat", ["nested", hax.ScanCheckpointPolicy(nested=2)], ids=str)
def test_nested_scan_in_reverse_matches_the_plain_scan(remat):
    init = hax.zeros((Batch, Embed))
    plain_carry, plain_ys = hax.scan(step, Time, reverse=True)(init, X)
    carry, ys = hax.scan(step, Time, reverse=True, remat=remat)(init, X)
    np.testing.assert_allclose(np.asarray(carry.array), np.asarray(plain_carry.array), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ys.array), np.asarray(plain_ys.array), rtol=1e-6)
