"""The names added from Haliax's __all__ equal their jnp meaning for random shapes and axis orders."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

POOL = [hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4)]


@st.composite
def arrays(draw, min_axes=1):
    axes = tuple(draw(st.permutations(POOL))[: draw(st.integers(min_axes, 3))])
    seed = draw(st.integers(0, 2**16))
    raw = np.random.default_rng(seed).normal(size=[a.size for a in axes]).astype(np.float32)
    return hax.NamedArray(jnp.asarray(raw), axes), raw


# One program per drawn axes, axis and count (shared by examples drawing the same): eager calls would
# compile each primitive for every drawn shape.
@functools.partial(jax.jit, static_argnums=(0, 1))
def repeat_tile_pad_nanargs(axis, n, x, with_nan):
    named_nan = hax.NamedArray(with_nan, x.axes)
    return (
        hax.repeat(x, n, axis.name),
        hax.tile(x, {axis.name: n}),
        hax.pad_left(x, axis.name, axis.resize(axis.size + n), value=7.0),
        (hax.nanargmax(named_nan, axis.name), hax.nanargmin(named_nan, axis.name)),
    )


@settings(max_examples=25)
@given(arrays(), st.data())
def test_repeat_tile_pad_left_nanargmax_equal_jnp(xr, data):
    x, raw = xr
    axis = data.draw(st.sampled_from(x.axes))
    i = x.axes.index(axis)
    n = data.draw(st.integers(1, 3))
    with_nan = np.where(raw > 1.5, np.nan, raw)
    rep, tiled, padded, (nanargmax, nanargmin) = repeat_tile_pad_nanargs(axis, n, x, with_nan)
    assert rep.axes[i] == axis.resize(axis.size * n)
    np.testing.assert_array_equal(np.asarray(rep.array), np.repeat(raw, n, axis=i))
    np.testing.assert_array_equal(
        np.asarray(tiled.array), np.tile(raw, [n if j == i else 1 for j in range(raw.ndim)])
    )
    widths = [(n, 0) if j == i else (0, 0) for j in range(raw.ndim)]
    np.testing.assert_array_equal(np.asarray(padded.array), np.pad(raw, widths, constant_values=7.0))
    if not np.isnan(with_nan).all(axis=i).any():
        np.testing.assert_array_equal(np.asarray(nanargmax.array), np.nanargmax(with_nan, i))
        np.testing.assert_array_equal(np.asarray(nanargmin.array), np.nanargmin(with_nan, i))
    assert hax.ndim(x) == raw.ndim and hax.product is hax.prod


@functools.partial(jax.jit, static_argnums=0)  # one program per drawn axes and order, as above
def comparisons(order, x):
    permuted = x.rearrange(order)
    same = (hax.allclose(x, permuted), hax.array_equal(x, permuted), hax.array_equiv(x, permuted))
    bumped = permuted + 1e-3
    near = (hax.array_equal(x, bumped), hax.allclose(x, bumped, atol=1e-2))
    renamed = hax.array_equal(x, x.rename({x.axes[0].name: "zz"}))
    first = x[x.axes[0].name, 0]
    broadcast = hax.array_equiv(hax.broadcast_axis(first, x.axes[0]), first) if x.ndim > 1 else True
    return same, near, renamed, broadcast


@settings(max_examples=25)
@given(arrays(), st.data())
def test_whole_array_comparisons_align_by_name(xr, data):
    x, raw = xr
    order = tuple(data.draw(st.permutations(x.axes)))
    same, (bumped_equal, bumped_close), renamed_equal, broadcast_equiv = comparisons(order, x)
    assert all(bool(s) for s in same)
    assert not bool(bumped_equal) and bool(bumped_close)
    assert not bool(renamed_equal)
    assert bool(broadcast_equiv)


# One program per example (shared by examples drawing the same sizes): eager calls would compile each
# primitive for every drawn shape.
@functools.partial(jax.jit, static_argnums=2)
def bincount_searchsorted_unique(values, sorted_values, n_bins):
    x = hax.named(values, "t")
    counts = hax.bincount(x, hax.Axis("v", n_bins))
    weighted = hax.bincount(x, hax.Axis("v", n_bins), weights=hax.named(jnp.ones(len(values)) * 2, "t"))
    queries = hax.named(jnp.asarray([0, 3, 7]), "q")
    found = hax.searchsorted(hax.named(sorted_values, "s"), queries, side="right")
    return counts, weighted, found, hax.unique_values(x, hax.Axis("u", 7), fill_value=-1)


@settings(max_examples=25)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=12), st.integers(1, 8))
def test_bincount_searchsorted_unique_equal_numpy(values, n_bins):
    counts, weighted, found, unique = bincount_searchsorted_unique(
        np.asarray(values), np.asarray(sorted(values)), n_bins
    )
    expected = np.bincount(np.asarray(values), minlength=n_bins)[:n_bins]
    np.testing.assert_array_equal(np.asarray(counts.array), expected)
    np.testing.assert_array_equal(np.asarray(weighted.array), 2 * expected)
    assert found.axes == (hax.Axis("q", 3),)
    np.testing.assert_array_equal(
        np.asarray(found.array), np.searchsorted(sorted(values), [0, 3, 7], side="right")
    )
    distinct = sorted(set(values))
    np.testing.assert_array_equal(np.asarray(unique.array), distinct + [-1] * (7 - len(distinct)))


FFTS = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]


@settings(max_examples=25)
@given(arrays(), st.sampled_from(FFTS), st.data())
def test_fft_family_equals_jnp_fft_along_the_named_axis(xr, name, data):
    x, raw = xr
    axis = data.draw(st.sampled_from(x.axes))
    i = x.axes.index(axis)
    n = data.draw(st.sampled_from([None, 2, 6]))
    spec = axis.name if n is None else {axis.name: n}
    # one program per example, with its reference: eagerly each primitive compiled for every drawn shape
    out, expected = jax.jit(
        lambda x: (getattr(hax, name)(x, spec), getattr(jnp.fft, name)(x.array, n=n, axis=i))
    )(x)
    assert [a.name for a in out.axes] == [a.name for a in x.axes]
    assert out.axes[i].size == expected.shape[i]
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(expected), rtol=1e-4, atol=1e-4)


def test_fft_helpers():
    F = hax.Axis("f", 5)
    np.testing.assert_allclose(np.asarray(hax.fftfreq(F, 0.5).array), np.fft.fftfreq(5, 0.5))
    r = hax.rfftfreq(F)
    assert r.axes == (F.resize(3),)
    x = hax.arange((hax.Axis("a", 4), F))
    np.testing.assert_array_equal(
        np.asarray(hax.fftshift(x, "f").array), np.fft.fftshift(np.asarray(x.array), axes=1)
    )
    np.testing.assert_array_equal(np.asarray(hax.ifftshift(hax.fftshift(x)).array), np.asarray(x.array))
    with pytest.raises(ValueError, match="name the axis"):
        hax.fft(x)


def test_resize_axis_truncates_and_grows():
    V, E = hax.Axis("vocab", 4), hax.Axis("embed", 3)
    tree = {"emb": hax.random.normal(jax.random.PRNGKey(0), (V, E)), "bias": hax.ones(E), "n": 3}
    small = hax.tree_util.resize_axis(tree, "vocab", 2)
    assert small["emb"].axes == (V.resize(2), E) and small["bias"] is tree["bias"] and small["n"] == 3
    np.testing.assert_array_equal(np.asarray(small["emb"].array), np.asarray(tree["emb"].array)[:2])
    big = hax.tree_util.resize_axis(tree, "vocab", 6)
    np.testing.assert_allclose(
        np.asarray(big["emb"].array)[4:],
        np.broadcast_to(np.asarray(tree["emb"].array).mean(0), (2, 3)),
        rtol=1e-6,
    )
    drawn = hax.tree_util.resize_axis(tree, "vocab", 6, key=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(drawn["emb"].array)[:4], np.asarray(tree["emb"].array))
    assert not np.allclose(np.asarray(drawn["emb"].array)[4], np.asarray(drawn["emb"].array)[5])


def test_scan_aware_tree_map_sees_blocks_without_the_block_axis():
    L, E = hax.Axis("layers", 3), hax.Axis("embed", 2)
    keys = jax.random.split(jax.random.PRNGKey(0), L.size)
    tree = {"stack": hax.nn.Stacked.init(L, hax.nn.Linear)(E, E.alias("out"), key=keys), "x": hax.ones(E)}
    seen = []

    def double(x):
        seen.append(x.axes)
        return x * 2

    out = hax.tree_util.scan_aware_tree_map(double, tree)
    assert all(L not in axes for axes in seen)
    assert out["stack"].stacked.weight.axes[0] == L
    np.testing.assert_allclose(
        np.asarray(out["stack"].stacked.weight.array), 2 * np.asarray(tree["stack"].stacked.weight.array)
    )


def test_shape_checks_can_be_turned_off_and_util_helpers():
    assert hax.are_shape_checks_enabled()
    with pytest.raises(ValueError, match="does not match"):
        hax.NamedArray(jnp.zeros(3), (hax.Axis("a", 2),))
    previous = hax.enable_shape_checks(False)
    try:
        assert previous is True and not hax.are_shape_checks_enabled()
        hax.NamedArray(jnp.zeros(3), (hax.Axis("a", 2),))
    finally:
        hax.enable_shape_checks(previous)
    assert hax.util.index_where(lambda v: v == 2, [1, 2, 2]) == 1
    with pytest.raises(ValueError):
        hax.util.index_where(lambda v: v > 5, [1])
    assert hax.nn.scan.ScanCheckpointPolicy is hax.ScanCheckpointPolicy


@functools.partial(jax.jit, static_argnums=(0, 1))  # one program per drawn order and size, for speed
def unique_family(order, n_unique, raw):
    x = hax.named(raw, tuple(POOL[:2])).rearrange(order)
    U = hax.Axis("u", n_unique)
    return (
        x,
        hax.unique_counts(x, U, fill_value=-1),
        jnp.unique_counts(x.array, size=n_unique, fill_value=-1),
        hax.unique_inverse(x, hax.Axis("u", 5)),
        hax.unique(x, U, return_index=True, return_inverse=True, return_counts=True, fill_value=-1),
        hax.unique(x, U, fill_value=-1),
    )


@settings(max_examples=25)
@given(st.permutations(POOL[:2]), st.integers(0, 2**16), st.integers(1, 8))
def test_unique_family_equals_jnp(order, seed, n_unique):
    raw = np.random.default_rng(seed).integers(0, 5, size=(2, 3))
    x, (values, counts), ref, (distinct, inverse), (v, idx, inv, cnt), plain = unique_family(
        tuple(order), n_unique, jnp.asarray(raw)
    )
    flat = np.asarray(x.array)
    np.testing.assert_array_equal(np.asarray(values.array), np.asarray(ref.values))
    np.testing.assert_array_equal(np.asarray(counts.array), np.asarray(ref.counts))
    assert inverse.axes == x.axes
    np.testing.assert_array_equal(np.asarray(distinct.array)[np.asarray(inverse.array)], flat)
    np.testing.assert_array_equal(np.asarray(cnt.array), np.asarray(ref.counts))
    assert plain.axes == (hax.Axis("u", n_unique),)


@functools.partial(jax.jit, static_argnums=(0, 1))  # one program per drawn order and bit order, for speed
def packed_and_unpacked(order, bitorder, raw):
    x = hax.named(raw, tuple(POOL)).rearrange(order)
    packed = hax.packbits(x, "c", bitorder=bitorder)
    return x, packed, hax.unpackbits(packed, "c", count=4, bitorder=bitorder)


@settings(max_examples=25)
@given(st.permutations(POOL), st.integers(0, 2**16), st.sampled_from(["big", "little"]))
def test_packbits_round_trip_equals_jnp(order, seed, bitorder):
    raw = np.random.default_rng(seed).integers(0, 2, size=(2, 3, 4)).astype(np.uint8)
    x, packed, back = packed_and_unpacked(tuple(order), bitorder, raw)
    i = x.axes.index(POOL[2])
    np.testing.assert_array_equal(
        np.asarray(packed.array), np.packbits(np.asarray(x.array), axis=i, bitorder=bitorder)
    )
    assert back.axes == x.axes
    np.testing.assert_array_equal(np.asarray(back.array), np.asarray(x.array))
