"""``Conv`` and ``ConvTranspose`` equal the positional ``jax.lax`` convolutions they stand for.

Inputs come in random axis orders with any number of batch axes; the reference is one
``conv_general_dilated`` call on an ``(N, C, *spatial)`` array built by hand, and ``ConvTranspose`` is also
checked against what a transposed convolution means: the transpose (VJP) of a strided ``Conv``.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import haliax_lite as hax
import haliax_lite.nn as hnn

SPATIAL_NAMES = ("height", "width", "depth")


@st.composite
def conv_cases(draw, transpose: bool):
    """A layer config and an input with random axis order; spatial sizes give a non-empty output."""
    n = draw(st.integers(1, 3))
    spatial = tuple(hax.Axis(SPATIAL_NAMES[i], draw(st.integers(1, 6 if n < 3 else 3))) for i in range(n))
    batch = tuple(hax.Axis(f"batch{i}", draw(st.integers(1, 3))) for i in range(draw(st.integers(0, 2))))
    groups = draw(st.integers(1, 3))
    In = hax.Axis("chan", groups * draw(st.integers(1, 2)))
    Out = hax.Axis("feat", groups * draw(st.integers(1, 2)))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(n))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(n))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(n))
    padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(n))
    output_padding = tuple(draw(st.integers(0, s - 1)) for s in stride) if transpose else None
    axes = draw(st.permutations((*batch, *spatial, In)))
    return dict(
        spatial=spatial,
        batch=batch,
        In=In,
        Out=Out,
        kernel=kernel,
        stride=stride,
        dilation=dilation,
        padding=padding,
        groups=groups,
        output_padding=output_padding,
        axes=tuple(axes),
        use_bias=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
    )


def conv_out_size(size, k, s, d, lo, hi):
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


def transpose_out_size(size, k, s, d, lo, hi, o):
    return (size - 1) * s - lo - hi + d * (k - 1) + o + 1


def random_input(case):
    """The input's values, named inside the programs below."""
    return np.random.default_rng(case["seed"]).normal(size=[a.size for a in case["axes"]]).astype(np.float32)


def as_nc_spatial(x: hax.NamedArray, case, channel):
    """The positional ``(N, C, *spatial)`` array, N the batch axes flattened in their drawn order."""
    order = (*case["batch"], channel, *(hax.axis_name(s) for s in case["spatial"]))
    arr = hax.rearrange(x, order).array
    return arr.reshape((math.prod(a.size for a in case["batch"]), *arr.shape[len(case["batch"]) :]))


def weight_oi_spatial(layer):
    return hax.rearrange(layer.weight, (layer.Out, layer.In.name, *(s.name for s in layer.Spatial))).array


def reference(layer, x, case, transpose):
    lhs = as_nc_spatial(x, case, case["In"])
    n = len(case["spatial"])
    if transpose:
        pads = [
            (d * (k - 1) - lo, d * (k - 1) - hi + o)
            for k, d, (lo, hi), o in zip(
                case["kernel"], case["dilation"], case["padding"], case["output_padding"], strict=True
            )
        ]
        out = jax.lax.conv_general_dilated(
            lhs,
            weight_oi_spatial(layer),
            (1,) * n,
            pads,
            lhs_dilation=case["stride"],
            rhs_dilation=case["dilation"],
            feature_group_count=case["groups"],
        )
    else:
        out = jax.lax.conv_general_dilated(
            lhs,
            weight_oi_spatial(layer),
            case["stride"],
            case["padding"],
            rhs_dilation=case["dilation"],
            feature_group_count=case["groups"],
        )
    if layer.bias is not None:
        out = out + layer.bias.array.reshape((-1,) + (1,) * n)
    return out


def make_layer(case, transpose):
    common = dict(
        stride=case["stride"],
        padding=case["padding"],
        dilation=case["dilation"],
        groups=case["groups"],
        use_bias=case["use_bias"],
        key=jax.random.PRNGKey(case["seed"]),
    )
    if transpose:
        return hnn.ConvTranspose.init(
            case["spatial"],
            case["In"],
            case["Out"],
            case["kernel"],
            output_padding=case["output_padding"],
            **common,
        )
    return hnn.Conv.init(case["spatial"], case["In"], case["Out"], case["kernel"], **common)


def expected_axes(case, transpose):
    """The output's axes, or None when some spatial axis would be empty."""
    sizes = {}
    for i, ax in enumerate(case["spatial"]):
        args = (ax.size, case["kernel"][i], case["stride"][i], case["dilation"][i], *case["padding"][i])
        if transpose:
            sizes[ax.name] = transpose_out_size(*args, case["output_padding"][i])
        else:
            sizes[ax.name] = conv_out_size(*args)
    if min(sizes.values()) < 1:
        return None
    return tuple(
        case["Out"] if a == case["In"] else a.resize(sizes[a.name]) if a.name in sizes else a
        for a in case["axes"]
    )


@pytest.mark.parametrize("transpose", [False, True], ids=["Conv", "ConvTranspose"])
@settings(max_examples=15)
@given(data=st.data())
def test_conv_equals_conv_general_dilated_for_any_axis_order(transpose, data):
    case = data.draw(conv_cases(transpose))
    axes = expected_axes(case, transpose)
    assume(axes is not None)

    @jax.jit  # one program per example: eager calls would compile each primitive for every drawn shape
    def run(raw):
        layer = make_layer(case, transpose)
        if case["use_bias"]:  # a zero-mean uniform bias is a weak check: shift it
            layer = eqx.tree_at(lambda m: m.bias, layer, layer.bias + 1.0)
        x = hax.named(raw, case["axes"])
        out = layer(x)
        return out, as_nc_spatial(out, case, case["Out"]), reference(layer, x, case, transpose)

    out, got, expected = run(random_input(case))

    assert out.axes == axes
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=8)
@given(data=st.data())
def test_conv_transpose_is_the_transpose_of_a_strided_conv(data):
    """With the kernel flipped and its channels swapped, ConvTranspose is the VJP of Conv (groups=1)."""
    case = data.draw(conv_cases(transpose=True))
    case.update(groups=1, use_bias=False, In=hax.Axis("chan", 2), Out=hax.Axis("feat", 3))
    case["axes"] = tuple(case["In"] if a.name == "chan" else a for a in case["axes"])
    axes = expected_axes(case, transpose=True)
    assume(axes is not None)

    @jax.jit  # one program per example: eager calls would compile each primitive for every drawn shape
    def run(raw):
        up = make_layer(case, transpose=True)
        x = hax.named(raw, case["axes"])
        # a Conv from ConvTranspose's outputs back to its inputs, with the kernel flipped in space
        down = hnn.Conv.init(
            case["spatial"],
            case["Out"],
            case["In"],
            case["kernel"],
            stride=case["stride"],
            padding=case["padding"],
            dilation=case["dilation"],
            use_bias=False,
            key=jax.random.PRNGKey(0),
        )
        flipped = jnp.flip(up.weight.array, axis=tuple(range(2, up.weight.ndim)))
        down = eqx.tree_at(
            lambda m: m.weight, down, hax.NamedArray(jnp.swapaxes(flipped, 0, 1), down.weight.axes)
        )

        z = hax.zeros(axes)
        y, pullback = jax.vjp(down, z)
        (transposed,) = pullback(x)
        return y, up(x), transposed

    y, out, transposed = run(random_input(case))
    assert y.axes == case["axes"]
    np.testing.assert_allclose(out.array, transposed.array, rtol=1e-5, atol=1e-5)


def test_conv_transpose_equals_lax_conv_transpose():
    Time, In, Out = hax.Axis("time", 7), hax.Axis("in", 3), hax.Axis("out", 2)

    @jax.jit  # one program: eagerly the init, the input and both convolutions compiled op by op
    def run():
        layer = hnn.ConvTranspose.init(
            Time,
            In,
            Out,
            4,
            stride=3,
            padding=((1, 2),),
            output_padding=1,
            use_bias=False,
            key=jax.random.PRNGKey(0),
        )
        x = hax.random.normal(jax.random.PRNGKey(1), (In, Time))
        k, d, (lo, hi), o = 4, 1, (1, 2), 1
        expected = jax.lax.conv_transpose(
            x.array[None],
            layer.weight.array,
            (3,),
            [(d * (k - 1) - lo, d * (k - 1) - hi + o)],
            dimension_numbers=("NCH", "OIH", "NCH"),
        )[0]
        return expected, layer(x)

    expected, out = run()
    assert out.axes == (Out, Time.resize((7 - 1) * 3 - 3 + 3 + 1 + 1))
    np.testing.assert_allclose(out.array, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls", [hnn.Conv, hnn.ConvTranspose])
def test_gradients_flow_and_jit_gives_the_same_values(cls):
    Batch, H, W = hax.Axis("batch", 2), hax.Axis("h", 5), hax.Axis("w", 4)
    In, Out = hax.Axis("in", 4), hax.Axis("out", 6)
    layer = cls.init((H, W), In, Out, (3, 2), stride=2, padding=1, groups=2, key=jax.random.PRNGKey(0))
    x = hax.random.normal(jax.random.PRNGKey(1), (W, In, Batch, H))

    def loss(layer, x):
        return hax.sum(hax.square(layer(x))).scalar()

    value, (g_layer, g_x) = jax.value_and_grad(loss, argnums=(0, 1))(layer, x)
    jit_value = eqx.filter_jit(loss)(layer, x)
    np.testing.assert_allclose(jit_value, value, rtol=1e-5)
    assert g_x.axes == x.axes and g_layer.weight.axes == layer.weight.axes
    for g in (g_x.array, g_layer.weight.array, g_layer.bias.array):
        assert np.all(np.isfinite(g)) and np.any(g != 0)
    # the weight gradient equals a finite difference along a random direction
    direction = jax.random.normal(jax.random.PRNGKey(2), layer.weight.array.shape)
    eps = 1e-3
    moved = [
        eqx.tree_at(lambda m: m.weight, layer, layer.weight + sign * eps * direction) for sign in (1, -1)
    ]
    numeric = (loss(moved[0], x) - loss(moved[1], x)) / (2 * eps)
    np.testing.assert_allclose(jnp.vdot(g_layer.weight.array, direction), numeric, rtol=2e-2)


def test_weight_layout_and_init_bounds_follow_haliax():
    H, W = hax.Axis("h", 9), hax.Axis("w", 9)
    In, Out = hax.Axis("in", 6), hax.Axis("out", 4)
    # both layers in one program: eagerly each init's random draws compiled op by op
    layer, unbiased = jax.jit(
        lambda: (
            hnn.Conv.init((H, W), In, Out, (3, 5), groups=2, key=jax.random.PRNGKey(0)),
            hnn.Conv.init((H, W), In, Out, 3, use_bias=False, key=jax.random.PRNGKey(0)),
        )
    )()
    assert layer.weight.axes == (Out, In.resize(3), H.resize(3), W.resize(5))
    assert layer.bias.axes == (Out,)
    limit = 1 / math.sqrt(3 * 5 * 3)
    for p in (layer.weight.array, layer.bias.array):
        assert np.abs(p).max() <= limit and np.abs(p).max() > limit / 2
    assert unbiased.bias is None
    assert (layer.kernel_size, layer.stride, layer.padding, layer.dilation) == (
        (3, 5),
        (1, 1),
        ((0, 0),) * 2,
        (1, 1),
    )


def test_spatial_given_by_name_and_an_input_without_batch_axes():
    In, Out, T = hax.Axis("in", 2), hax.Axis("out", 3), hax.Axis("t", 6)

    @jax.jit  # one program: eagerly the inits, the input and each call compiled op by op
    def run():
        by_name = hnn.Conv.init("t", In, Out, 3, padding=[(2, 0)], key=jax.random.PRNGKey(0))
        by_axis = hnn.Conv.init(T, In, Out, 3, padding=((2, 0),), key=jax.random.PRNGKey(0))
        x = hax.random.normal(jax.random.PRNGKey(1), (T, In))
        x2 = x.at["t", 4].set(100.0)
        return by_name, x, by_name(x), by_axis(x), by_name(x2)

    by_name, x, out, out_by_axis, out2 = run()
    assert out.axes == (T, Out)  # causal padding keeps the length
    np.testing.assert_allclose(out.array, out_by_axis.array)
    # causal: output position i sees inputs up to i only
    np.testing.assert_allclose(out2["t", :4].array, out["t", :4].array)
    assert jax.jit(lambda m, x: m(x))(by_name, x).axes == out.axes


Spatial, In, Out = (hax.Axis("h", 5), hax.Axis("w", 5)), hax.Axis("in", 4), hax.Axis("out", 6)
KEY = jax.random.PRNGKey(0)


@pytest.mark.parametrize("cls", [hnn.Conv, hnn.ConvTranspose])
@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((Spatial, In, Out, (3, 3, 3)), {}, r"kernel_size \(3, 3, 3\) has 3 entries for the 2 spatial axes"),
        ((Spatial, In, Out, 3), {"stride": (1, 2, 3)}, r"stride .* 3 entries for the 2 spatial axes"),
        ((Spatial, In, Out, 0), {}, r"kernel_size must be ints >= 1"),
        ((Spatial, In, Out, 3), {"dilation": 0}, r"dilation must be ints >= 1"),
        ((Spatial, In, Out, 3), {"padding": "SAME"}, r"padding 'SAME' must be ints or \(low, high\) pairs"),
        ((Spatial, In, Out, 3), {"padding": ((1, 2, 3), 1)}, r"padding entry \(1, 2, 3\) must be"),
        ((Spatial, In, In, 3), {}, r"In and Out are both named 'in'.*Axis\('in_out', 4\)"),
        (
            (Spatial, In, hax.Axis("h", 2), 3),
            {},
            r"the channel axes \['h'\] are also in Spatial \['h', 'w'\]",
        ),
        ((Spatial, In, Out, 3), {"groups": 3}, r"groups=3 must divide both channel sizes"),
        ((Spatial, In, hax.Axis("out", 5), 3), {"groups": 2}, r"groups=2 must divide both channel sizes"),
        ((Spatial, In, Out, 3), {"groups": 0}, r"groups must be an int >= 1"),
        (((), In, Out, 3), {}, r"Spatial names no axes"),
        ((("h", "h"), In, Out, 3), {}, r"Spatial names an axis twice"),
        ((Spatial, "in", Out, 3), {}, r"In must be one hax.Axis with a size"),
    ],
)
def test_bad_configs_say_what_is_wrong(cls, args, kwargs, message):
    where = f"{cls.__name__}.init"
    with pytest.raises((ValueError, TypeError), match=rf"{where}: {message}"):
        cls.init(*args, key=KEY, **kwargs)


def test_conv_transpose_rejects_negative_output_padding():
    with pytest.raises(ValueError, match=r"ConvTranspose.init: output_padding must be ints >= 0"):
        hnn.ConvTranspose.init(Spatial, In, Out, 3, output_padding=-1, key=KEY)


@pytest.mark.parametrize("cls", [hnn.Conv, hnn.ConvTranspose])
def test_bad_inputs_say_what_is_wrong(cls):
    layer = cls.init(Spatial, In, Out, 3, key=KEY)
    name = cls.__name__
    with pytest.raises(ValueError, match=rf"{name}: the input's axes .* lack the axes \['w'\]"):
        layer(hax.ones((Spatial[0], In)))
    with pytest.raises(ValueError, match=rf"{name}: the input's 'in' axis has size 3, the layer expects"):
        layer(hax.ones((*Spatial, In.resize(3))))
    with pytest.raises(ValueError, match=rf"{name}: the input already has the output axis 'out'"):
        layer(hax.ones((*Spatial, In, Out)))


def test_an_empty_output_is_an_error_that_names_the_axis():
    layer = hnn.Conv.init(Spatial, In, Out, (3, 7), key=KEY)
    with pytest.raises(ValueError, match=r"Conv: the output would have sizes \{'w': -1\}"):
        layer(hax.ones((*Spatial, In)))


def test_the_module_keeps_runnable_examples():  # --doctest-modules runs them with the package's tests
    import doctest

    from haliax_lite.nn import conv

    assert len([t for t in doctest.DocTestFinder().find(conv) if t.examples]) >= 2


def test_one_pair_for_one_axis_needs_its_own_tuple():
    with pytest.raises(
        ValueError, match=r"Conv.init: padding \(2, 0\) has 2 entries .* written \(\(2, 0\),\)"
    ):
        hnn.Conv.init("t", In, Out, 3, padding=(2, 0), key=KEY)
