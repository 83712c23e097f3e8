"""``MoELinear`` equals a per-expert loop of plain matrix products (values, gradients, under jit)."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
import haliax_lite.nn as hnn


@st.composite
def moe_cases(draw):
    """Token axes, channel sizes and an input axis order; group sizes summing to at most the token count."""
    tokens = tuple(hax.Axis(f"tok{i}", draw(st.integers(1, 4))) for i in range(draw(st.integers(1, 2))))
    n_tokens = math.prod(a.size for a in tokens)
    Experts = hax.Axis("experts", draw(st.integers(1, 4)))
    In, Out = hax.Axis("embed", draw(st.integers(1, 4))), hax.Axis("mlp", draw(st.integers(1, 4)))
    routed = draw(st.one_of(st.just(n_tokens), st.integers(0, n_tokens)))  # mostly every token
    cuts = sorted(
        draw(st.lists(st.integers(0, routed), min_size=Experts.size - 1, max_size=Experts.size - 1))
    )
    group_sizes = np.diff([0, *cuts, routed])
    axes = tuple(draw(st.permutations((*tokens, In))))
    return dict(
        tokens=tuple(a for a in axes if a != In),  # tokens are numbered in the input's axis order
        Experts=Experts,
        In=In,
        Out=Out,
        axes=axes,
        group_sizes=group_sizes,
        out_first=draw(st.booleans()),
        use_bias=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def per_expert_loop(weight_eio, bias, x_tokens_in, group_sizes):
    """The meaning of MoELinear on a ``(tokens, In)`` array: token t uses the expert whose run holds it."""
    out = np.zeros((x_tokens_in.shape[0], weight_eio.shape[-1]), np.float64)
    start = 0
    for e, size in enumerate(group_sizes):
        out[start : start + size] = x_tokens_in[start : start + size] @ weight_eio[e]
        start += size
    return out + (0.0 if bias is None else bias)


@eqx.filter_jit  # one program per example: eager calls would compile each primitive for every drawn shape
def init_layer(Experts, In, Out, key, use_bias, out_first, bias):
    layer = hnn.MoELinear.init(Experts, In, Out, key=key, use_bias=use_bias, out_first=out_first)
    if bias is not None:  # the init bias is zero: make it count
        layer = eqx.tree_at(lambda m: m.bias, layer, hax.named(bias, Out))
    return layer


def setup(case):
    rng = np.random.default_rng(case["seed"])
    bias = rng.normal(size=case["Out"].size) if case["use_bias"] else None
    layer = init_layer(
        case["Experts"],
        case["In"],
        case["Out"],
        jax.random.PRNGKey(case["seed"]),
        case["use_bias"],
        case["out_first"],
        bias,
    )
    x = hax.named(rng.normal(size=[a.size for a in case["axes"]]).astype(np.float32), case["axes"])
    return layer, x, hax.named(jnp.asarray(case["group_sizes"], jnp.int32), case["Experts"])


def loop_layouts(layer, x, tokens):
    """The weight as ``(Experts, In, Out)`` and the input as ``(tokens, In)``, as the loops take them."""
    weight = hax.rearrange(layer.weight, (layer.Experts, layer.In, layer.Out)).array
    flat = hax.rearrange(x, (*tokens, layer.In)).array.reshape(-1, layer.In.size)
    return weight, flat


def reference(weight, flat, bias, case):
    bias = None if bias is None else np.asarray(bias, np.float64)
    return per_expert_loop(
        np.asarray(weight, np.float64), bias, np.asarray(flat, np.float64), case["group_sizes"]
    )


@settings(max_examples=20)
@given(moe_cases())
def test_moe_linear_equals_a_per_expert_loop(case):
    layer, x, group_sizes = setup(case)
    axes_order = (case["Experts"], case["Out"], case["In"]) if case["out_first"] else None
    assert layer.out_first == case["out_first"]
    assert layer.weight.axes == (axes_order or (case["Experts"], case["In"], case["Out"]))

    @jax.jit  # one program per example: the layer and the layouts the reference reads
    def run(layer, x, g):
        out = layer(x, g)
        return (
            out,
            hax.rearrange(out, (*case["tokens"], case["Out"])).array,
            *loop_layouts(layer, x, case["tokens"]),
        )

    out, got, weight, flat = run(layer, x, group_sizes)

    assert out.axes == tuple(case["Out"] if a == case["In"] else a for a in case["axes"])
    got = np.asarray(got).reshape(-1, case["Out"].size)
    bias = None if layer.bias is None else layer.bias.array
    np.testing.assert_allclose(got, reference(weight, flat, bias, case), rtol=1e-5, atol=1e-5)


@settings(max_examples=8)
@given(moe_cases())
def test_gradients_equal_the_per_expert_loops(case):
    layer, x, group_sizes = setup(case)

    def loss(layer, x):
        return hax.sum(hax.sin(layer(x, group_sizes))).scalar()

    def loop_loss(weight_eio, bias, flat):  # the loop, in jnp, differentiated by JAX
        out, start = [], 0
        for e, size in enumerate(case["group_sizes"]):
            out.append(flat[start : start + size] @ weight_eio[e])
            start += size
        out.append(jnp.zeros((flat.shape[0] - start, weight_eio.shape[-1])))
        out = jnp.concatenate(out)
        return jnp.sum(jnp.sin(out + (0.0 if bias is None else bias)))

    @jax.jit  # one program per example: eagerly the loop compiled each operation for every drawn shape
    def gradients(layer, x):
        g_layer, g_x = jax.grad(loss, argnums=(0, 1))(layer, x)
        weight, flat = loop_layouts(layer, x, case["tokens"])
        bias = 0.0 if layer.bias is None else layer.bias.array
        g_w, g_b, g_flat = jax.grad(loop_loss, argnums=(0, 1, 2))(weight, bias, flat)
        got_w, got_x = loop_layouts(g_layer, g_x, case["tokens"])
        got_b = None if layer.bias is None else g_layer.bias.array
        return (got_w, g_w), (got_x, g_flat), (got_b, g_b)

    (got_w, g_w), (got_x, g_flat), (got_b, g_b) = gradients(layer, x)
    np.testing.assert_allclose(got_w, g_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_x, g_flat, rtol=1e-4, atol=1e-5)
    if got_b is not None:
        np.testing.assert_allclose(got_b, g_b, rtol=1e-4, atol=1e-5)


def test_experts_own_their_tokens_and_unrouted_tokens_get_the_bias():
    Experts, Tokens, In, Out = (
        hax.Axis("experts", 3),
        hax.Axis("tokens", 6),
        hax.Axis("in", 2),
        hax.Axis("out", 2),
    )
    layer = hnn.MoELinear.init(Experts, In, Out, key=jax.random.PRNGKey(0))
    # expert e multiplies by (e + 1) * identity; the bias is 10
    weight = hax.named(jnp.stack([(e + 1) * jnp.eye(2) for e in range(3)]), (Experts, In, Out))
    layer = eqx.tree_at(lambda m: (m.weight, m.bias), layer, (weight, hax.full(Out, 10.0)))
    x = hax.ones((Tokens, In))
    out = layer(x, jnp.array([2, 0, 3]))  # a plain array works too; expert 1 gets no tokens
    np.testing.assert_allclose(out.array[:, 0], [11, 11, 13, 13, 13, 10])


def test_use_gmm_gives_the_same_result_and_init_scale_scales():
    Experts, In, Out, Tokens = hax.Axis("e", 2), hax.Axis("in", 8), hax.Axis("out", 3), hax.Axis("t", 4)
    key = jax.random.PRNGKey(0)
    plain = hnn.MoELinear.init(Experts, In, Out, key=key)
    gmm = hnn.MoELinear.init(Experts, In, Out, key=key, use_gmm=True)
    scaled = hnn.MoELinear.init(Experts, In, Out, key=key, init_scale=0.5, use_bias=False)
    assert gmm.use_gmm and not plain.use_gmm and scaled.bias is None
    np.testing.assert_allclose(scaled.weight.array, 0.5 * plain.weight.array, rtol=1e-6)
    assert np.abs(plain.weight.array).max() <= 3 / math.sqrt(8)
    x, g = hax.random.normal(key, (Tokens, In)), hax.named(jnp.array([1, 3]), Experts)
    np.testing.assert_allclose(gmm(x, g).array, plain(x, g).array)


E, In, Out = hax.Axis("experts", 2), hax.Axis("embed", 4), hax.Axis("mlp", 3)
KEY = jax.random.PRNGKey(0)


@pytest.mark.parametrize(
    "axes, message",
    [
        ((E, In, In), r"Experts, In and Out need three distinct names, got \['experts', 'embed', 'embed'\]"),
        ((In, In, Out), r"Experts, In and Out need three distinct names"),
        ((E, "embed", Out), r"In must be one hax.Axis with a size, got 'embed'"),
        (((E, E.alias("e2")), In, Out), r"Experts must be one hax.Axis"),
    ],
)
def test_bad_configs_say_what_is_wrong(axes, message):
    with pytest.raises((ValueError, TypeError), match=rf"MoELinear.init: {message}"):
        hnn.MoELinear.init(*axes, key=KEY)


def test_bad_inputs_say_what_is_wrong():
    layer = hnn.MoELinear.init(E, In, Out, key=KEY)
    Tokens = hax.Axis("tokens", 3)
    sizes = hax.named(jnp.array([1, 2]), E)
    with pytest.raises(
        ValueError, match=r"MoELinear: the input's axes .* lack the axes \['embed'\] the layer needs"
    ):
        layer(hax.ones(Tokens), sizes)
    with pytest.raises(ValueError, match=r"the input's 'embed' axis has size 5, the layer expects"):
        layer(hax.ones((Tokens, In.resize(5))), sizes)
    with pytest.raises(ValueError, match=r"the input already has the output axis 'mlp'"):
        layer(hax.ones((Tokens, In, Out)), sizes)
    x = hax.ones((Tokens, In))
    with pytest.raises(ValueError, match=r"group_sizes must have exactly the axis .*experts"):
        layer(x, hax.named(jnp.array([1, 2]), "e"))
    with pytest.raises(ValueError, match=r"group_sizes must have shape \(2,\), one count per expert"):
        layer(x, jnp.array([1, 1, 1]))
    with pytest.raises(TypeError, match=r"group_sizes must hold integers \(token counts\), got float32"):
        layer(x, jnp.array([1.0, 2.0]))


def test_the_module_keeps_runnable_examples():  # --doctest-modules runs them with the package's tests
    import doctest

    from haliax_lite.nn import moe_linear

    assert any(t.examples for t in doctest.DocTestFinder().find(moe_linear))
