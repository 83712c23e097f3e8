"""Elementwise wrappers equal their jnp meaning after aligning axes by name; broadcasting follows Haliax."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite import binary, unary

NAMES = ["a", "b", "c", "d"]


@st.composite
def axes_and_perm(draw):
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    axes = tuple(hax.Axis(n, draw(st.integers(1, 3))) for n in names)
    perm = draw(st.permutations(range(len(axes))))
    return axes, tuple(axes[i] for i in perm)


def _values(axes, seed, low=0.1, high=2.0):
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=[a.size for a in axes]).astype(np.float32)


FLOAT_UNARY = [
    n
    for n in unary.__all__
    # integer-only, domain >= 1, or (fix) not in jnp
    if n not in {"bitwise_not", "bitwise_invert", "bitwise_count", "invert", "arccosh", "i0", "fix"}
]
INTEGER_ONLY = {
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
    "bitwise_left_shift",
    "bitwise_right_shift",
}
FLOAT_BINARY = [n for n in binary.__all__ if n not in INTEGER_ONLY]


@pytest.mark.parametrize("name", FLOAT_UNARY)
def test_unary_equals_jnp_and_keeps_axes(name):
    axes = (hax.Axis("a", 2), hax.Axis("b", 3))
    raw = _values(axes, 0, 0.1, 0.9)
    out = getattr(hax, name)(hax.NamedArray(jnp.asarray(raw), axes))
    assert out.axes == axes
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(getattr(jnp, name)(raw)), rtol=1e-6)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))  # one program per drawn function and axes, for speed
def binary_and_reference(name, axes, permuted, x_raw, y_raw, y_permuted):
    out = getattr(hax, name)(hax.NamedArray(x_raw, axes), hax.NamedArray(y_permuted, permuted))
    return out, getattr(jnp, name)(x_raw, y_raw)


@settings(max_examples=25)
@given(axes_and_perm(), st.sampled_from(FLOAT_BINARY), st.integers(0, 2**16))
def test_binary_aligns_by_name_whatever_the_order(ap, name, seed):
    axes, permuted = ap
    x_raw, y_raw = _values(axes, seed), _values(axes, seed + 1)
    perm = [axes.index(a) for a in permuted]
    out, expected = binary_and_reference(name, axes, permuted, x_raw, y_raw, np.transpose(y_raw, perm))
    assert out.axes == axes
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(expected), rtol=1e-5, atol=1e-6)


@settings(max_examples=25)
@given(axes_and_perm(), st.integers(0, 2**16), st.data())
def test_broadcast_of_a_subset_equals_numpy(ap, seed, data):
    axes, _ = ap
    keep = data.draw(st.lists(st.sampled_from(axes), unique=True, max_size=len(axes)))
    sub_axes = tuple(a for a in axes if a in keep)
    x_raw, y_raw = _values(axes, seed), _values(sub_axes, seed + 1)
    x, y = hax.NamedArray(jnp.asarray(x_raw), axes), hax.NamedArray(jnp.asarray(y_raw), sub_axes)
    expanded = y_raw.reshape([a.size if a in sub_axes else 1 for a in axes])
    for result in (x - y, y - x):
        assert result.axes == axes
    np.testing.assert_allclose(np.asarray((x - y).array), x_raw - expanded, rtol=1e-6)
    np.testing.assert_allclose(np.asarray((y - x).array), expanded - x_raw, rtol=1e-6)


def test_operators_and_scalars():
    A = hax.Axis("a", 3)
    x = hax.arange(A, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray((2 * x + 1).array), [1, 3, 5])
    np.testing.assert_allclose(np.asarray((1 - x).array), [1, 0, -1])
    np.testing.assert_allclose(np.asarray((x**2 / 2).array), [0, 0.5, 2])
    np.testing.assert_array_equal(np.asarray((x >= 1).array), [False, True, True])
    np.testing.assert_array_equal(np.asarray((x == 1).array), [False, True, False])
    np.testing.assert_allclose(np.asarray((-x).array), [0, -1, -2])
    np.testing.assert_allclose(np.asarray(abs(x - 1).array), [1, 0, 1])
    assert ((x > 0) & (x < 2)).array.tolist() == [False, True, False]
    assert (~(x > 0)).array.tolist() == [True, False, False]


def test_where_clip_and_isclose_broadcast_by_name():
    A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    x = hax.arange((A, B), dtype=jnp.float32)
    picked = hax.where(hax.arange(B) > 0, x, -1.0)
    assert picked.axes == (A, B)
    np.testing.assert_allclose(np.asarray(picked.array), [[-1, 1, 2], [-1, 4, 5]])
    clipped = hax.clip(x, 1.0, hax.full(B, 3.0))
    np.testing.assert_allclose(np.asarray(clipped.array), np.clip(np.arange(6).reshape(2, 3), 1, 3))
    assert bool(hax.all(hax.isclose(x, x + 1e-9)).scalar())
    (rows, cols) = hax.where(x > 3, fill_value=-1, new_axis=hax.Axis("hit", 3))
    assert rows.array.tolist() == [1, 1, -1] and cols.array.tolist() == [1, 2, -1]


def test_two_output_and_divmod_functions():
    A = hax.Axis("a", 3)
    x = hax.named(jnp.array([1.5, -2.25, 4.0]), A)
    frac, whole = hax.modf(x)
    assert frac.axes == whole.axes == (A,)
    np.testing.assert_allclose(np.asarray(whole.array), [1.0, -2.0, 4.0])
    q, r = hax.divmod(hax.named(jnp.array([7, 8, 9]), A), 4)
    assert q.array.tolist() == [1, 2, 2] and r.array.tolist() == [3, 0, 1]
    np.testing.assert_allclose(np.asarray(hax.rsqrt(hax.full(A, 4.0)).array), [0.5] * 3)


def test_disjoint_axes_are_an_ambiguous_broadcast():
    x = hax.ones((hax.Axis("batch", 2), hax.Axis("embed", 3)))
    y = hax.ones(hax.Axis("heads", 4))
    with pytest.raises(ValueError, match=r"Ambiguous broadcast.*batch=2, embed=3.*heads=4"):
        x + y
    assert (hax.broadcast_axis(x, y.axes) + y).shape == {"heads": 4, "batch": 2, "embed": 3}


def test_same_name_different_size_is_an_error_naming_both_shapes():
    x = hax.ones((hax.Axis("batch", 2), hax.Axis("embed", 3)))
    y = hax.ones(hax.Axis("embed", 4))
    with pytest.raises(ValueError, match=r"'embed' has sizes 3 and 4.*\(batch=2, embed=3\) and \(embed=4\)"):
        x * y


@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_every_binary_op_on_permuted_axes(name):
    axes = (hax.Axis("a", 2), hax.Axis("b", 3))
    x_raw, y_raw = _values(axes, 5), _values(axes, 6)
    x = hax.NamedArray(jnp.asarray(x_raw), axes)
    y = hax.NamedArray(jnp.asarray(y_raw.T), axes[::-1])
    out = getattr(hax, name)(x, y)
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(getattr(jnp, name)(x_raw, y_raw)), rtol=1e-5)


@pytest.mark.parametrize("name", sorted(INTEGER_ONLY | {"add", "multiply", "maximum", "floor_divide"}))
def test_integer_binary_ops(name):
    axes = (hax.Axis("a", 3), hax.Axis("b", 2))
    x_raw = np.array([[1, 2], [3, 4], [5, 6]], np.int32)
    y_raw = np.array([1, 2], np.int32)
    out = getattr(hax, name)(hax.NamedArray(jnp.asarray(x_raw), axes), hax.named(jnp.asarray(y_raw), "b"))
    assert out.axes == axes
    np.testing.assert_array_equal(np.asarray(out.array), np.asarray(getattr(jnp, name)(x_raw, y_raw)))


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.int8, jnp.uint32])
def test_dtypes_follow_jnp_promotion(dtype):
    axes = (hax.Axis("a", 2), hax.Axis("b", 2))
    x = hax.ones(axes, dtype=dtype)
    assert (x + x).dtype == (jnp.ones(2, dtype) + jnp.ones(2, dtype)).dtype
    assert (x * 2).dtype == (jnp.ones(2, dtype) * 2).dtype
    assert hax.maximum(x, hax.ones(axes[1], dtype=jnp.float32)).dtype == jnp.promote_types(dtype, jnp.float32)
    assert hax.invert(x > 0).dtype == jnp.bool_


@pytest.mark.parametrize("name", ["bitwise_count", "bitwise_invert", "bitwise_not", "invert"])
def test_integer_unary_ops(name):
    axes = (hax.Axis("a", 3),)
    raw = np.array([1, 6, 255], np.int32)
    out = getattr(hax, name)(hax.named(jnp.asarray(raw), axes))
    assert out.axes == axes
    np.testing.assert_array_equal(np.asarray(out.array), np.asarray(getattr(jnp, name)(raw)))


def test_fix_rounds_toward_zero():
    out = hax.fix(hax.named(jnp.array([-1.5, -0.2, 0.7, 2.9]), "a"))
    np.testing.assert_array_equal(np.asarray(out.array), np.fix([-1.5, -0.2, 0.7, 2.9]))
