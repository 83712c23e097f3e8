"""Axis-spec utilities and small helpers, against Haliax's definitions (order of results, errors)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite import jax_utils, util
from haliax_lite.haxtyping import DTypeCategory, Named, NamedArrayAxes

A, B, C = hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4)


@given(st.permutations(["a", "b", "c", "d", "e"]), st.sets(st.sampled_from(["a", "b", "c", "d", "e"])))
def test_eliminate_axes_keeps_the_spec_order_whatever_the_removal_order(order, removed):
    spec = tuple(hax.Axis(n, i + 1) for i, n in enumerate(order))
    kept = hax.eliminate_axes(spec, tuple(sorted(removed, reverse=True)))
    assert kept == tuple(a for a in spec if a.name not in removed)
    assert hax.without_axes(spec, (*removed, "absent")) == kept


def test_eliminate_axes_needs_every_axis_present_with_its_size():
    with pytest.raises(ValueError, match=r"^Axis 'z' not present in axis spec"):
        hax.eliminate_axes((A, B), ("a", "z"))
    with pytest.raises(ValueError, match=r"Axis 'a' has different sizes .*: 2 != 5"):
        hax.eliminate_axes((A, B), hax.Axis("a", 5))
    assert hax.eliminate_axes({"a": 2, "b": 3}, "a") == {"b": 3}


def test_without_axes_ignores_absent_axes_but_not_a_size_clash():
    assert hax.without_axes((A, B), ("z", B)) == (A,)
    with pytest.raises(ValueError, match="different sizes"):
        hax.without_axes((A, B), hax.Axis("b", 9))
    assert hax.without_axes((A, B), hax.Axis("b", 9), allow_mismatched_sizes=True) == (A,)
    assert hax.without_axes(("a", "b"), A) == ("b",)


def test_replace_axis_puts_the_new_axes_in_place():
    assert hax.replace_axis((A, B, C), "b", (hax.Axis("x", 1), hax.Axis("y", 1))) == (
        A,
        hax.Axis("x", 1),
        hax.Axis("y", 1),
        C,
    )
    assert hax.replace_axis((A, B), B, "b") == (A, "b")  # replacing an axis by its own name is allowed
    assert hax.replace_axis({"a": 2, "b": 3}, "a", hax.Axis("z", 7)) == {"z": 7, "b": 3}


def test_replace_axis_errors_name_the_axis():
    with pytest.raises(ValueError, match=r"^Axis 'q' not found in axis spec"):
        hax.replace_axis((A, B), "q", C)
    with pytest.raises(
        ValueError, match=r"Axis 'b' already present .* replacing 'a' with it would cause a conflict"
    ):
        hax.replace_axis((A, B), "a", (C, B))


def test_axis_indices_returns_none_for_a_missing_axis_as_haliax():
    x = hax.zeros((A, B))
    assert x.axis_indices("b") == 1 and x.axis_indices("z") is None
    assert x.axis_indices(("z", "a")) == (None, 0)
    with pytest.raises(ValueError, match="does not match"):
        x.axis_indices(hax.Axis("a", 7))
    with pytest.raises(ValueError, match=r"Axis 'z' not found in array with axes"):
        x.require_axis_indices("z")


@pytest.mark.parametrize("shape", [1, 3, (2, 3), (1, 1)])
def test_shaped_rng_split_lays_out_jax_random_split(shape):
    key = jax.random.PRNGKey(7)
    keys = jax_utils.shaped_rng_split(key, shape)
    dims = (shape,) if isinstance(shape, int) else shape
    assert keys.shape == (*dims, 2)
    count = int(np.prod(dims))
    expected = key[None] if count == 1 else jax.random.split(key, count)
    np.testing.assert_array_equal(keys.reshape(count, 2), expected)


@given(st.sampled_from([(6, 2), (6, 3), (8, 4), (5, 5), (4, 1)]), st.booleans())
def test_multilevel_scan_equals_a_plain_scan_in_value_and_gradient(sizes, reverse):
    length, outer = sizes
    xs = jnp.linspace(0.5, 1.5, length)

    def step(c, x):
        return jnp.sin(c) * x + 0.1, c * x

    def plain(c0):
        c, ys = jax.lax.scan(step, c0, xs, reverse=reverse)
        return c + ys.sum()

    def nested(c0):
        c, ys = jax_utils.multilevel_scan(step, c0, xs, outer, length, reverse=reverse)
        return c + ys.sum()

    @jax.jit  # one program per example: eagerly the scans and their gradients compiled op by op
    def both(c0):
        return (nested(c0), plain(c0)), (jax.grad(nested)(c0), jax.grad(plain)(c0))

    (nested_value, plain_value), (nested_grad, plain_grad) = both(0.3)
    np.testing.assert_allclose(nested_value, plain_value, rtol=1e-6)
    np.testing.assert_allclose(nested_grad, plain_grad, rtol=1e-5)


def test_multilevel_scan_refuses_an_uneven_split():
    with pytest.raises(ValueError, match="length 5 is not divisible into outer_size=2"):
        jax_utils.multilevel_scan(lambda c, x: (c, x), 0.0, jnp.ones(5), 2, 5)


def test_filter_checkpoint_passes_python_values_through():
    f = jax_utils.filter_checkpoint(lambda x, power: x**power)
    assert float(jax.grad(lambda x: f(x, 3))(2.0)) == 12.0


def test_small_helpers_behave_as_haliax_util():
    assert (
        util.maybe_untuple((1,)) == 1
        and util.maybe_untuple((1, 2)) == (1, 2)
        and util.maybe_untuple([1]) == [1]
    )
    assert util.is_jax_or_hax_array_like(hax.zeros(A)) and util.is_jax_or_hax_array_like(np.zeros(2))
    assert not util.is_jax_or_hax_array_like([1.0])
    assert util.UNSPECIFIED is not None and isinstance(util.UNSPECIFIED, util.Unspecified)


def test_a_dtype_category_narrows_an_annotation():
    floats = DTypeCategory("float", jnp.floating)
    spec = NamedArrayAxes(("a",), dtype=floats)
    assert hax.zeros(A).matches_axes(spec) and not hax.zeros(A, dtype=jnp.int32).matches_axes(spec)
    assert repr(floats) == "float"
    assert Named[hax.NamedArray, "a"] is not None
