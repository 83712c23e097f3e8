"""The polynomial family equals its jnp meaning, with the coefficient axis Haliax gives it: the named
input's axis resized (the first named argument's), else ``degree``."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

NAMES = st.sampled_from(["coef", "c", "power"])
COEFFS = st.lists(st.integers(-4, 4).map(float), min_size=1, max_size=5)
POOL = [hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4)]


def as_input(values, name, named: bool):
    return hax.named(jnp.asarray(values, jnp.float32), name) if named else jnp.asarray(values, jnp.float32)


def check(result, expected, axis_name, size=None):
    expected = np.asarray(expected)
    assert result.axes == (hax.Axis(axis_name, expected.shape[0] if size is None else size),)
    np.testing.assert_allclose(np.asarray(result.array), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30)
@given(COEFFS, COEFFS, NAMES, st.sampled_from(["first", "second", "neither", "both"]))
def test_binary_polynomial_ops_equal_jnp_and_keep_the_named_axis(p1, p2, name, which):
    a = as_input(p1, name, which in ("first", "both"))
    b = as_input(p2, "other", which in ("second", "both"))
    expected_name = {"first": name, "both": name, "second": "other", "neither": "degree"}[which]
    r1, r2 = jnp.asarray(p1, jnp.float32), jnp.asarray(p2, jnp.float32)
    check(hax.polyadd(a, b), jnp.polyadd(r1, r2), expected_name)
    check(hax.polysub(a, b), jnp.polysub(r1, r2), expected_name)
    check(hax.polymul(a, b), jnp.polymul(r1, r2), expected_name)
    if p2[0] != 0:
        q, r = hax.polydiv(a, b)
        eq, er = jnp.polydiv(r1, r2)
        check(q, eq, expected_name)
        check(r, er, expected_name)


@settings(max_examples=30)
@given(COEFFS, NAMES, st.booleans(), st.integers(1, 3))
def test_unary_polynomial_ops_equal_jnp(p, name, named, m):
    a, raw = as_input(p, name, named), jnp.asarray(p, jnp.float32)
    axis = name if named else "degree"
    check(hax.polyder(a, m=m), jnp.polyder(raw, m=m), axis)
    check(hax.polyint(a, m=m), jnp.polyint(raw, m=m), axis)
    k = jnp.arange(1.0, m + 1.0)
    check(hax.polyint(a, m=m, k=k), jnp.polyint(raw, m=m, k=k), axis)
    check(hax.poly(a), jnp.poly(raw), axis)
    check(
        hax.trim_zeros(as_input([0.0, *p, 0.0], name, named)),
        jnp.trim_zeros(jnp.asarray([0.0, *p, 0.0])),
        axis,
    )
    check(hax.trim_zeros(a, trim="f"), jnp.trim_zeros(raw, trim="f"), axis)


@settings(max_examples=25)
@given(COEFFS, st.permutations(POOL), st.integers(1, 3), st.integers(0, 2**16))
def test_polyval_keeps_the_axes_of_x_in_any_order(p, order, n_axes, seed):
    axes = tuple(order[:n_axes])
    raw_x = np.random.default_rng(seed).normal(size=[a.size for a in axes]).astype(np.float32)
    x = hax.NamedArray(jnp.asarray(raw_x), axes)
    coefficients = hax.named(jnp.asarray(p, jnp.float32), "coef")
    value = hax.polyval(coefficients, x)
    assert value.axes == axes
    expected = jnp.polyval(jnp.asarray(p, jnp.float32), jnp.asarray(raw_x))
    np.testing.assert_allclose(np.asarray(value.array), np.asarray(expected), rtol=1e-5)
    assert isinstance(hax.polyval(coefficients, 2.0), jax.Array)


@settings(max_examples=20)
@given(st.lists(st.integers(-3, 3).map(float), min_size=1, max_size=4, unique=True), NAMES, st.booleans())
def test_roots_of_poly_are_the_zeros(zeros, name, named):
    coefficients = hax.poly(as_input(zeros, name, named))
    found = hax.roots(coefficients)
    assert found.axes == (hax.Axis(name if named else "degree", len(zeros)),)
    np.testing.assert_allclose(np.sort_complex(np.asarray(found.array)), np.sort(zeros), atol=1e-3)


# One program per drawn degree, length and naming (shared by examples drawing the same), where eager each
# of the three fits compiled a program of its own (hax's and jnp's share it) for every drawn shape.
@functools.partial(jax.jit, static_argnums=(0, 1))
def fits(deg, named_x, x_raw, y_raw):
    x = hax.named(x_raw, "x") if named_x else x_raw
    y = hax.named(y_raw, "y")
    fitted = (
        hax.polyfit(x, y, deg),
        hax.polyfit(x, y, deg, full=True),
        hax.polyfit(x, y, deg, cov=True) if len(x_raw) > deg + 3 else None,
    )
    expected = (
        jnp.polyfit(x_raw, y_raw, deg),
        jnp.polyfit(x_raw, y_raw, deg, full=True),
        jnp.polyfit(x_raw, y_raw, deg, cov=True) if len(x_raw) > deg + 3 else None,
    )
    return fitted, expected


@settings(max_examples=20)
@given(st.integers(0, 3), st.integers(4, 7), st.booleans(), st.integers(0, 2**16))
def test_polyfit_equals_jnp_and_names_the_covariance(deg, n, named_x, seed):
    rng = np.random.default_rng(seed)
    x_raw = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    y_raw = rng.normal(size=n).astype(np.float32)
    (coefficients, full, with_cov), (expected, expected_full, expected_cov) = fits(deg, named_x, x_raw, y_raw)
    name = "x" if named_x else "y"
    check(coefficients, expected, name)
    check(full[0], expected_full[0], name)
    assert len(full) == 5 and all(isinstance(v, jax.Array) for v in full[1:])
    if n > deg + 3:
        cov = with_cov[1]
        assert cov.axes == (hax.Axis(name, deg + 1), hax.Axis(f"{name}_cov", deg + 1))
        np.testing.assert_allclose(np.asarray(cov.array), np.asarray(expected_cov[1]), rtol=1e-4, atol=1e-6)


@settings(max_examples=20)
@given(st.lists(st.floats(-2, 2, width=32), min_size=1, max_size=5), st.integers(1, 6), st.booleans())
def test_vander_equals_jnp(values, columns, as_axis):
    x = hax.named(jnp.asarray(values, jnp.float32), "x")
    degree = hax.Axis("power", columns) if as_axis else "power"
    result = hax.vander(x, degree)
    n = columns if as_axis else len(values)
    assert result.axes == (x.axes[0], hax.Axis("power", n))
    np.testing.assert_allclose(np.asarray(result.array), np.asarray(jnp.vander(x.array, N=n)), rtol=1e-6)


def test_polynomial_functions_trace_under_jit_and_reject_many_axes():
    p = hax.named(jnp.asarray([1.0, 2.0, 3.0]), "coef")
    jitted = jax.jit(
        lambda p: (hax.polyder(p), hax.polymul(p, p), hax.polyval(p, hax.arange(hax.Axis("x", 4))))
    )
    der, mul, val = jitted(p)
    assert der.axes == (hax.Axis("coef", 2),) and mul.axes == (hax.Axis("coef", 5),)
    assert val.axes == (hax.Axis("x", 4),)
    with pytest.raises(ValueError, match="one axis"):
        hax.polyder(hax.ones((hax.Axis("a", 2), hax.Axis("b", 3))))
    with pytest.raises(ValueError, match="1-D"):
        hax.vander(hax.ones((hax.Axis("a", 2), hax.Axis("b", 3))), "power")
