"""``Linear``, ``Embedding`` and ``MLP`` equal the positional programs they stand for (values, gradients)."""

import math
import string

import equinox as eqx
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
import haliax_lite.nn as hnn


def axes_strategy(prefix: str, min_size: int, max_size: int):
    sizes = st.lists(st.integers(1, 4), min_size=min_size, max_size=max_size)
    return sizes.map(lambda ss: tuple(hax.Axis(f"{prefix}{i}", s) for i, s in enumerate(ss)))


def normal(rng, axes):
    return hax.named(rng.normal(size=[a.size for a in axes]).astype(np.float32), axes)


@settings(max_examples=4)
@given(
    axes_strategy("in", 1, 2),
    axes_strategy("out", 1, 2),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**31 - 1),
)
def test_linear_equals_einsum_for_several_in_and_out_axes(In, Out, out_first, use_bias, seed):
    Batch = hax.Axis("batch", 3)
    rng = np.random.default_rng(seed)
    layer = hnn.Linear.init(In, Out, key=jax.random.PRNGKey(seed), use_bias=use_bias, out_first=out_first)
    if use_bias:
        layer = eqx.tree_at(lambda m: m.bias, layer, normal(rng, Out))
    x = normal(rng, (Batch, *In))

    letters = iter(string.ascii_lowercase)
    sym = {a.name: next(letters) for a in (Batch, *In, *Out)}
    w_axes = (*Out, *In) if out_first else (*In, *Out)
    assert layer.weight.axes == w_axes
    assert layer.out_first == out_first
    spec = (
        "".join(sym[a.name] for a in (Batch, *In))
        + ","
        + "".join(sym[a.name] for a in w_axes)
        + "->"
        + "".join(sym[a.name] for a in (Batch, *Out))
    )

    def named_loss(layer, x):
        out = layer(x)
        return hax.sum(hax.square(out)).scalar(), out.rearrange((Batch, *Out))

    (_, out), grads = jax.jit(jax.value_and_grad(named_loss, has_aux=True))(layer, x)
    w, b = np.asarray(layer.weight.array, np.float64), np.asarray(layer.bias.array) if use_bias else 0.0
    expected = np.einsum(spec, np.asarray(x.array, np.float64), w) + b
    np.testing.assert_allclose(out.array, expected, rtol=1e-5, atol=1e-5)
    # d/dW sum(y^2) = 2 x^T y, d/db = 2 sum(y): the positional gradient in closed form
    grad_spec = spec.split("->")[1] + "," + spec.split(",")[0] + "->" + spec.split(",")[1].split("->")[0]
    expected_w = 2 * np.einsum(grad_spec, expected, np.asarray(x.array, np.float64))
    np.testing.assert_allclose(grads.weight.array, expected_w, rtol=1e-4, atol=1e-4)
    if use_bias:
        np.testing.assert_allclose(grads.bias.array, 2 * expected.sum(0), rtol=1e-4, atol=1e-4)


def test_linear_init_draws_a_truncated_normal_scaled_by_fan_in():
    In, Out = (hax.Axis("heads", 8), hax.Axis("head_size", 16)), hax.Axis("embed", 256)
    layer = hnn.Linear.init(In, Out, key=jax.random.PRNGKey(0), init_scale=2.0)
    w = np.asarray(layer.weight.array)
    scale = 2.0 / math.sqrt(8 * 16)
    assert np.abs(w).max() <= 3 * scale + 1e-6
    assert abs(w.std() / scale - 0.986) < 0.02  # the std of a standard normal truncated at ±3
    np.testing.assert_array_equal(layer.bias.array, np.zeros(256))
    assert hnn.Linear.init(In, Out, key=jax.random.PRNGKey(0), use_bias=False).bias is None


def test_linear_on_an_input_without_its_in_axes_names_them():
    layer = hnn.Linear.init(hax.Axis("embed", 4), hax.Axis("mlp", 3), key=jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="embed"):
        layer(hax.ones(hax.Axis("hidden", 4)))


@settings(max_examples=4)
@given(st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_embedding_lookup_and_unembedding_equal_indexing_and_matmul(n_embed_axes, seed):
    Vocab, Batch, Pos = hax.Axis("vocab", 7), hax.Axis("batch", 2), hax.Axis("position", 3)
    Embed = tuple(hax.Axis(f"embed{i}", i + 2) for i in range(n_embed_axes))
    ids = np.random.default_rng(seed).integers(0, Vocab.size, size=(2, 3))

    @jax.jit  # one program per example, for speed: eagerly each op compiled for every drawn shape
    def lookup_and_unembed(seed, ids):
        table = hnn.Embedding.init(Vocab, Embed, key=jax.random.PRNGKey(seed))
        vectors = table(hax.named(ids, (Batch, Pos)))
        logits = table.unembed(vectors)
        w = table.weight.rearrange((Vocab, *Embed)).array
        return w, vectors.rearrange((Batch, Pos, *Embed)).array, logits.rearrange((Batch, Pos, Vocab))

    w, vectors, logits = lookup_and_unembed(seed, ids)
    w, vectors = np.asarray(w), np.asarray(vectors)
    np.testing.assert_array_equal(vectors, w[ids])
    flat = vectors.reshape(2, 3, -1)
    expected = flat @ w.reshape(Vocab.size, -1).T
    np.testing.assert_allclose(logits.array, expected, rtol=1e-5, atol=1e-6)


def test_embedding_init_scale_is_init_scale_over_embed_size():
    Vocab, Embed = hax.Axis("vocab", 512), hax.Axis("embed", 64)
    table = hnn.Embedding.init(Vocab, Embed, key=jax.random.PRNGKey(0), init_scale=3.0)
    assert abs(float(np.asarray(table.weight.array).std()) / (3.0 / 64) - 0.986) < 0.02


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_mlp_equals_the_chain_of_matmuls_and_alternates_hidden_names(depth):
    In, Out, Batch = hax.Axis("embed", 5), hax.Axis("logits", 3), hax.Axis("batch", 4)
    mlp = hnn.MLP.init(In, Out, width=6, depth=depth, activation=hnn.gelu, key=jax.random.PRNGKey(depth))
    assert len(mlp.layers) == depth + 1
    assert mlp.In == In and mlp.Out == Out
    hidden_names = [layer.Out.name for layer in mlp.layers[:-1]]
    assert hidden_names == ["mlp", "mlp2", "mlp"][:depth]
    x = normal(np.random.default_rng(depth), (Batch, In))

    y = x.array
    for i, layer in enumerate(mlp.layers):
        y = y @ layer.weight.rearrange((layer.In, layer.Out)).array + layer.bias.array
        if i < depth:
            y = jax.nn.gelu(y)
    np.testing.assert_allclose(mlp(x).rearrange((Batch, Out)).array, y, rtol=1e-5, atol=1e-5)


def test_mlp_width_axis_and_final_bias_options():
    In, Out, Width = hax.Axis("embed", 5), hax.Axis("logits", 3), hax.Axis("hidden", 7)
    mlp = hnn.MLP.init(In, Out, Width, 2, use_final_bias=False, key=jax.random.PRNGKey(0))
    assert [layer.Out for layer in mlp.layers] == [Width, Width.alias("hidden2"), Out]
    assert mlp.layers[-1].bias is None and mlp.layers[0].bias is not None
    with pytest.raises(ValueError, match="depth"):
        hnn.MLP.init(In, Out, 4, -1, key=jax.random.PRNGKey(0))


def test_linear_output_follows_the_axis_mapping_under_plain_jit():
    """Linear constrains its output with ``auto_sharded``, so model code needs no sharding calls."""
    if jax.device_count() < 8:
        pytest.skip("needs the 8 fake CPU devices the root conftest sets up")
    Batch, Embed, Mlp = hax.Axis("batch", 8), hax.Axis("embed", 4), hax.Axis("mlp", 6)
    layer = hnn.Linear.init(Embed, Mlp, key=jax.random.PRNGKey(0))
    x = hax.ones((Batch, Embed))
    with jax.set_mesh(jax.make_mesh((4, 2), ("data", "model"))):
        with hax.axis_mapping({"batch": "data", "mlp": "model"}):
            out = jax.jit(lambda layer, x: layer(x))(layer, x)
    assert out.axes == (Batch, Mlp)
    assert out.array.sharding.spec == jax.sharding.PartitionSpec("data", "model")
    np.testing.assert_allclose(out.array, np.asarray(layer(x).array), rtol=1e-5, atol=1e-6)


def test_linear_and_mlp_contract_with_the_given_dot_general():
    calls = []

    def doubled_dot_general(lhs, rhs, dimension_numbers, *args, **kwargs):
        calls.append(dimension_numbers)
        return 2 * jax.lax.dot_general(lhs, rhs, dimension_numbers, *args, **kwargs)

    In, Out = hax.Axis("embed", 3), hax.Axis("logits", 2)
    key = jax.random.PRNGKey(0)
    plain = hnn.Linear.init(In, Out, key=key, use_bias=False)
    doubled = hnn.Linear.init(In, Out, key=key, use_bias=False, dot_general=doubled_dot_general)
    x = hax.ones(In)
    np.testing.assert_allclose(doubled(x).array, 2 * plain(x).array, rtol=1e-6)
    mlp = hnn.MLP.init(In, Out, 4, 1, key=jax.random.PRNGKey(1), dot_general=doubled_dot_general)
    calls.clear()
    mlp(x)
    assert len(calls) == 2
