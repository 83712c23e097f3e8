"""Activations and normalisations equal the positional ``jax.nn`` programs they stand for."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
import haliax_lite.nn as hnn

NAMES = ("batch", "position", "embed", "heads")


@st.composite
def named_arrays(draw, min_axes=1, dtype=np.float32):
    """A named array of random axes (distinct names, random order, sizes 1..5) and values."""
    names = draw(st.lists(st.sampled_from(NAMES), min_size=min_axes, max_size=3, unique=True))
    sizes = draw(st.lists(st.integers(1, 5), min_size=len(names), max_size=len(names)))
    seed = draw(st.integers(0, 2**31 - 1))
    values = np.random.default_rng(seed).normal(size=sizes).astype(dtype) * 3
    axes = tuple(hax.Axis(n, s) for n, s in zip(names, sizes, strict=True))
    return hax.named(jax.device_put(values), axes)  # jnp.asarray would compile a program per drawn shape


def normal(seed, *axes):
    return hax.named(np.random.default_rng(seed).normal(size=[a.size for a in axes]).astype(np.float32), axes)


def some_axes(draw, x):
    names = [a.name for a in x.axes]
    return draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))


ACTIVATIONS = {
    "relu": jax.nn.relu,
    "relu6": jax.nn.relu6,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "soft_sign": jax.nn.soft_sign,
    "silu": jax.nn.silu,
    "swish": jax.nn.swish,
    "log_sigmoid": jax.nn.log_sigmoid,
    "hard_sigmoid": jax.nn.hard_sigmoid,
    "hard_silu": jax.nn.hard_silu,
    "hard_swish": jax.nn.hard_swish,
    "hard_tanh": jax.nn.hard_tanh,
    "selu": jax.nn.selu,
    "gelu": jax.nn.gelu,
    "leaky_relu": jax.nn.leaky_relu,
    "elu": jax.nn.elu,
    "celu": jax.nn.celu,
    "quick_gelu": lambda v: v * jax.nn.sigmoid(1.702 * v),
    "relu_squared": lambda v: jnp.square(jnp.maximum(v, 0)),
}


@settings(max_examples=5)
@given(named_arrays())
def test_every_activation_is_its_jax_nn_function_elementwise(x):
    @jax.jit
    def both(x):  # one compilation per example instead of one per activation
        named = {name: getattr(hnn, name)(x) for name in ACTIVATIONS}
        return named, {name: reference(x.array) for name, reference in ACTIVATIONS.items()}

    named, expected = both(x)
    for name in ACTIVATIONS:
        assert named[name].axes == x.axes, name
        np.testing.assert_allclose(named[name].array, expected[name], rtol=1e-6, atol=1e-6, err_msg=name)


def test_activations_accept_plain_arrays_and_scalars():
    assert float(hnn.relu(-2.0)) == 0.0
    np.testing.assert_array_equal(hnn.silu(jnp.arange(3.0)), jax.nn.silu(jnp.arange(3.0)))
    np.testing.assert_allclose(hnn.gelu(jnp.ones(2), approximate=False), jax.nn.gelu(jnp.ones(2), False))


def test_glu_halves_the_gated_axis_and_keeps_its_name():
    Batch, Embed = hax.Axis("batch", 2), hax.Axis("embed", 6)
    x = normal(0, Batch, Embed)
    out = hnn.glu(x, Embed)
    assert out.axes == (Batch, Embed.resize(3))
    np.testing.assert_allclose(out.array, jax.nn.glu(x.array, axis=1), rtol=1e-6)


def np_logsumexp(x, axis):
    top = x.max(axis=axis, keepdims=True)
    return np.log(np.exp(x - top).sum(axis=axis, keepdims=True)) + top


@settings(max_examples=8)
@given(st.data())
def test_softmax_family_over_named_axes_equals_positional(data):
    x = data.draw(named_arrays())
    names = some_axes(data.draw, x)
    positions = tuple(x.axes.index(x.resolve_axis(n)) for n in names)
    program = jax.jit(
        lambda x: (
            hnn.softmax(x, axis=names),
            hnn.log_softmax(x, axis=names),
            hnn.logsumexp(x, axis=names),
            hnn.softmax(x),
        )
    )
    softmax, log_softmax, logsumexp, softmax_all = program(x)
    raw = np.asarray(x.array, np.float64)
    log_z = np_logsumexp(raw, positions)
    assert softmax.axes == x.axes and log_softmax.axes == x.axes
    np.testing.assert_allclose(softmax.array, np.exp(raw - log_z), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_softmax.array, raw - log_z, rtol=1e-5, atol=1e-5)
    assert [a.name for a in logsumexp.axes] == [a.name for a in x.axes if a.name not in names]
    # atol as for log_softmax: a log-sum near 0 is the maximum plus the log of a sum, cancelling, so its
    # float32 error is absolute (one drawn case: -0.00138795 against -0.00138789, 5e-5 relative)
    np.testing.assert_allclose(logsumexp.array, log_z.squeeze(positions), rtol=1e-5, atol=1e-5)
    log_z_all = np_logsumexp(raw, tuple(range(raw.ndim)))
    np.testing.assert_allclose(softmax_all.array, np.exp(raw - log_z_all), rtol=1e-5, atol=1e-7)


def test_softmax_over_an_axis_the_array_lacks_names_it():
    x = hax.ones((hax.Axis("batch", 2), hax.Axis("embed", 3)))
    with pytest.raises(ValueError, match="vocab"):
        hnn.softmax(x, axis="vocab")
    with pytest.raises(ValueError, match="vocab"):
        hnn.logsumexp(x, axis=hax.Axis("vocab", 3))


def positional_norm(x, axes, weight, bias, eps, center):
    mean = x.mean(axis=axes, keepdims=True) if center else 0.0
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


@settings(max_examples=8)
@given(st.data(), st.booleans())
def test_layer_norm_and_rms_norm_equal_positional(data, use_affine):
    x = data.draw(named_arrays())
    names = some_axes(data.draw, x)
    norm_axes = tuple(x.resolve_axis(n) for n in names)
    positions = tuple(x.axes.index(a) for a in norm_axes)
    expanded = tuple(a.size if a in norm_axes else 1 for a in x.axes)
    rng = np.random.default_rng(0)
    weight = rng.normal(size=[a.size for a in norm_axes]).astype(np.float32)
    bias = rng.normal(size=[a.size for a in norm_axes]).astype(np.float32)
    for cls, center in ((hnn.LayerNorm, True), (hnn.RmsNorm, False)):
        layer = cls.init(norm_axes, eps=1e-5, use_weight=use_affine, use_bias=use_affine)
        if use_affine:
            layer = eqx_replace(layer, hax.named(weight, norm_axes), hax.named(bias, norm_axes))
        in_x_order = tuple(a for a in x.axes if a in norm_axes)
        w = hax.named(weight, norm_axes).rearrange(in_x_order).array.reshape(expanded) if use_affine else 1.0
        b = hax.named(bias, norm_axes).rearrange(in_x_order).array.reshape(expanded) if use_affine else 0.0
        expected = positional_norm(np.asarray(x.array), positions, w, b, 1e-5, center)
        got = jax.jit(lambda layer, x: layer(x).rearrange(x.axes))(layer, x).array
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4, err_msg=cls.__name__)


def eqx_replace(layer, weight, bias):
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, (weight, bias))


def test_norm_computes_in_its_dtype_and_returns_the_input_dtype():
    Embed = hax.Axis("embed", 8)
    x = normal(0, Embed).astype(jnp.bfloat16)
    layer = hnn.RmsNorm.init(Embed, use_weight=False, use_bias=False, dtype=jnp.float32)
    out = layer(x)
    assert out.dtype == jnp.bfloat16
    expected = positional_norm(np.asarray(x.array, np.float32), (0,), 1.0, 0.0, 1e-5, False)
    np.testing.assert_allclose(np.asarray(out.array, np.float32), expected, rtol=1e-2)


def test_norm_of_an_array_without_the_norm_axis_names_it():
    layer = hnn.LayerNorm.init(hax.Axis("embed", 4))
    with pytest.raises(ValueError, match="embed"):
        layer(hax.ones(hax.Axis("hidden", 4)))


def test_standardize_equals_jax_nn_standardize():
    Batch, Embed = hax.Axis("batch", 3), hax.Axis("embed", 5)
    x = normal(1, Batch, Embed)
    out = hnn.standardize(x, Embed)
    np.testing.assert_allclose(out.rearrange((Batch, Embed)).array, jax.nn.standardize(x.array, 1), atol=1e-5)


def test_layer_gradients_equal_the_positional_gradients():
    Batch, Embed = hax.Axis("batch", 3), hax.Axis("embed", 5)
    x = normal(2, Batch, Embed)
    layer = hnn.LayerNorm.init(Embed)

    def named(layer, x):
        return hax.sum(hnn.silu(layer(x)) * hnn.softmax(x, Embed)).scalar()

    def positional(weight, bias, x):
        mean = x.mean(1, keepdims=True)
        normed = (x - mean) * jax.lax.rsqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5)
        return jnp.sum(jax.nn.silu(normed * weight + bias) * jax.nn.softmax(x, 1))

    grads_layer, grads_x = jax.jit(jax.grad(named, argnums=(0, 1)))(layer, x)
    expected = jax.jit(jax.grad(positional, argnums=(0, 1, 2)))(layer.weight.array, layer.bias.array, x.array)
    np.testing.assert_allclose(grads_layer.weight.array, expected[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads_layer.bias.array, expected[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads_x.rearrange((Batch, Embed)).array, expected[2], rtol=1e-4, atol=1e-5)
