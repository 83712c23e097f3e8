"""hax.nonzero equals jnp.nonzero for random shapes and axis orders: one index array per axis, in the
array's axis order, along one new axis whose size is the count (or the static size under jit)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

POOL = [hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4)]


@st.composite
def sparse_arrays(draw):
    axes = tuple(draw(st.permutations(POOL))[: draw(st.integers(1, 3))])
    seed = draw(st.integers(0, 2**16))
    raw = np.random.default_rng(seed).integers(-1, 2, size=[a.size for a in axes]) * (
        np.random.default_rng(seed + 1).random([a.size for a in axes]) < draw(st.floats(0.0, 1.0))
    )
    return hax.NamedArray(jnp.asarray(raw, jnp.int32), axes), raw


# Jitted (and shared by the examples, which repeat shapes): eagerly the indexing compiled each of its
# operations for every drawn shape.
select = jax.jit(lambda x, indices: x[{ax.name: i for ax, i in zip(x.axes, indices, strict=True)}])


@settings(max_examples=30)
@given(sparse_arrays())
def test_nonzero_without_size_equals_jnp_in_axis_order(xr):
    x, raw = xr
    indices = hax.nonzero(x)
    expected = np.nonzero(raw)
    assert len(indices) == x.ndim
    for got, want in zip(indices, expected, strict=True):
        assert got.axes == (hax.Axis("nonzero", len(want)),)
        np.testing.assert_array_equal(np.asarray(got.array), want)
    # the indices select the nonzero values, axis by axis
    np.testing.assert_array_equal(np.asarray(select(x, indices).array), raw[expected])


@settings(max_examples=30)
@given(sparse_arrays(), st.integers(0, 30), st.integers(-5, -1), st.booleans())
def test_nonzero_with_static_size_pads_or_truncates_under_jit(xr, size, fill, as_axis):
    x, raw = xr
    Hit = hax.Axis("hit", size)

    @jax.jit  # with the reference in the same program: one per example, not one per eager operation
    def fn(x):
        expected = jnp.nonzero(x.array, size=size, fill_value=fill)
        if as_axis:
            return hax.nonzero(x, new_axis=Hit, fill_value=fill), expected
        return hax.nonzero(x, size=size, fill_value=fill, new_axis="hit"), expected

    indices, expected = fn(x)
    for got, want in zip(indices, expected, strict=True):
        assert got.axes == (Hit,)
        np.testing.assert_array_equal(np.asarray(got.array), np.asarray(want))


def test_nonzero_errors_name_what_is_missing():
    x = hax.named(jnp.asarray([0, 1, 2]), "a")
    with pytest.raises(ValueError, match="static size"):
        jax.jit(hax.nonzero)(x)
    with pytest.raises(ValueError, match="disagrees"):
        hax.nonzero(x, size=2, new_axis=hax.Axis("hit", 3))
    with pytest.raises(TypeError, match="NamedArray"):
        hax.nonzero(jnp.asarray([0, 1]))
    # the one-argument where is the same function with a required fill_value and Axis
    rows = hax.where(x > 0, fill_value=-1, new_axis=hax.Axis("hit", 3))
    assert rows[0].array.tolist() == [1, 2, -1]
