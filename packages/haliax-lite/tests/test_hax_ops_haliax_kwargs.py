"""Ops with Haliax's keyword arguments and errors, value-checked against jax.numpy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import haliax_lite as hax

T, U = hax.Axis("t", 7), hax.Axis("u", 5)
VALUES = jnp.array([3, 1, 3, 2, 5, 1, 3])


@functools.partial(jax.jit, static_argnums=(1, 2))  # one program per drawn length, size and fill, for speed
def unique_and_reference(raw, size, fill):
    x = hax.named(raw, "t")
    flags = dict(return_index=True, return_inverse=True, return_counts=True, fill_value=fill)
    return x, hax.unique(x, hax.Axis("u", size), **flags), jnp.unique(raw, size=size, **flags)


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=9), st.integers(1, 8), st.booleans())
def test_unique_with_every_return_flag_matches_jnp_unique(data, size, filled):
    Unique = hax.Axis("u", size)
    fill = -9 if filled else None
    x, (values, index, inverse, counts), ref = unique_and_reference(np.array(data), size, fill)
    for got, want in zip((values, index, inverse, counts), ref, strict=True):
        np.testing.assert_array_equal(got.array, want.reshape(got.array.shape))
    assert values.axes == index.axes == counts.axes == (Unique,) and inverse.axes == x.axes


def test_each_shortcut_returns_what_unique_returns_with_its_flags():
    x = hax.named(VALUES, T)
    both = hax.unique(x, U, return_counts=True)
    np.testing.assert_array_equal(hax.unique_counts(x, U)[1].array, both[1].array)
    np.testing.assert_array_equal(
        hax.unique_values(x, U, fill_value=0).array, jnp.unique(VALUES, size=5, fill_value=0)
    )
    assert len(hax.unique_all(x, U)) == 4 and len(hax.unique_inverse(x, U)) == 2
    assert isinstance(hax.unique(x, U), hax.NamedArray)


def test_unique_along_an_axis_replaces_it_with_the_unique_axis():
    R, C = hax.Axis("row", 4), hax.Axis("col", 2)
    raw = jnp.array([[1, 2], [0, 5], [1, 2], [0, 5]])
    rows, inverse, counts = hax.unique(
        hax.named(raw, (R, C)), hax.Axis("u", 2), axis="row", return_inverse=True, return_counts=True
    )
    assert rows.axes == (hax.Axis("u", 2), C) and inverse.axes == (R,)
    np.testing.assert_array_equal(rows.array, [[0, 5], [1, 2]])
    np.testing.assert_array_equal(inverse.array, [1, 0, 1, 0])
    np.testing.assert_array_equal(counts.array, [2, 2])


@pytest.mark.parametrize("fn", [hax.tril, hax.triu])
@pytest.mark.parametrize("k", [-1, 0, 2])
def test_triangles_of_any_two_named_axes_end_with_them_as_haliax(fn, k):
    A, B, C = hax.Axis("a", 3), hax.Axis("b", 4), hax.Axis("c", 2)
    x = hax.random.normal(jax.random.PRNGKey(0), (A, C, B))
    out = fn(x, B, A, k=k)  # rows along b, columns along a
    assert out.axes == (C, B, A)
    np.testing.assert_array_equal(
        out.array, getattr(jnp, fn.__name__)(jnp.transpose(x.array, (1, 2, 0)), k=k)
    )


def test_roll_takes_a_named_integer_shift_per_slice_and_refuses_other_kinds():
    B, S = hax.Axis("b", 2), hax.Axis("s", 4)
    x = hax.arange((B, S))
    out = hax.roll(x, hax.named(jnp.array([1, 3]), B), "s")
    np.testing.assert_array_equal(out.array, [jnp.roll(x.array[0], 1), jnp.roll(x.array[1], 3)])
    with pytest.raises(TypeError, match="a shift must be integers"):
        hax.roll(x, hax.named(jnp.array([1.0, 2.0]), B), "s")
    with pytest.raises(ValueError, match=r"the shift has axes \['z'\] that the array"):
        hax.roll(x, hax.named(jnp.array([1, 2]), "z"), "s")
    with pytest.raises(ValueError, match=r"the shift's axes \['s'\] are also rolled"):
        hax.roll(x, hax.named(jnp.arange(4), S), "s")


def test_nonzero_takes_an_axis_as_size_as_haliax():
    Hits = hax.Axis("hits", 5)
    x = hax.named(VALUES > 2, T)
    (idx,) = jax.jit(lambda v: hax.nonzero(v, size=Hits, fill_value=-1))(x)
    assert idx.axes == (Hits,)
    np.testing.assert_array_equal(idx.array, jnp.nonzero(VALUES > 2, size=5, fill_value=-1)[0])


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_takes_side_and_sorter_as_keywords(side):
    raw = jnp.array([5, 1, 3, 3, 9])
    order = jnp.argsort(raw)
    queries = jnp.array([0, 3, 4, 10])
    got = hax.searchsorted(
        hax.named(raw, "a"), hax.named(queries, "q"), side=side, sorter=hax.named(order, "a")
    )
    np.testing.assert_array_equal(got.array, jnp.searchsorted(raw, queries, side=side, sorter=order))
    scalar = hax.searchsorted(hax.named(jnp.sort(raw), "a"), 3, side=side)
    assert isinstance(scalar, hax.NamedArray) and scalar.axes == ()
    with pytest.raises(ValueError, match="side must be"):
        hax.searchsorted(hax.named(raw, "a"), 3, side="middle")


def test_tile_grows_named_axes_and_adds_new_ones_in_front():
    A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    x = hax.arange((A, B))
    out = hax.tile(x, {"b": 2, "copies": 3})
    assert out.axes == (hax.Axis("copies", 3), A, B.resize(6))
    np.testing.assert_array_equal(out.array, jnp.tile(x.array, (3, 1, 2)))


@pytest.mark.parametrize("index", [np.int64(2), np.int32(2), np.array(2), np.uint8(2)])
def test_numpy_integer_scalars_index_like_python_ints(index):
    A, B = hax.Axis("a", 4), hax.Axis("b", 3)
    x = hax.arange((A, B))
    np.testing.assert_array_equal(x["a", index].array, x.array[2])
    np.testing.assert_array_equal(x.at["a", index].set(-1).array[2], [-1, -1, -1])


def test_a_named_dslice_start_reads_a_window_per_entry():
    B, P = hax.Axis("b", 2), hax.Axis("p", 6)
    x = hax.arange((B, P))
    starts = hax.named(jnp.array([1, 3]), B)
    window = x["p", hax.dslice(starts, 2)]
    assert window.axes == (B, P.resize(2))
    np.testing.assert_array_equal(window.array, [[1, 2], [9, 10]])
    scalar = x["p", hax.dslice(hax.named(jnp.array(4), ()), 3)]  # reads past the end as zeros
    np.testing.assert_array_equal(scalar.array, [[4, 5, 0], [10, 11, 0]])
    with pytest.raises(ValueError, match="varies along 'p' itself"):
        x["p", hax.dslice(hax.named(jnp.arange(6), P), 2)]


def test_ragged_multi_token_writes_name_the_axis_that_does_not_fit():
    B, P, E = hax.Axis("b", 2), hax.Axis("p", 5), hax.Axis("e", 3)
    cache, new = hax.zeros((B, P, E)), hax.ones((B, P.resize(3), E))
    written = hax.updated_slice(cache, {"p": hax.named(jnp.array([0, 2]), B)}, new)
    np.testing.assert_array_equal(written.array[:, :, 0], [[1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    with pytest.raises(
        ValueError,
        match=r"along axis 'p' \(size 5\) an update of 3 tokens cannot start at 3 \(at \{'b': 1\}\)",
    ):
        hax.updated_slice(cache, {"p": hax.named(jnp.array([0, 3]), B)}, new)
