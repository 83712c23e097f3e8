"""rearrange, flatten, split, stacking and named indexing equal their positional meaning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

N, C, H, W = hax.Axis("N", 2), hax.Axis("C", 3), hax.Axis("H", 4), hax.Axis("W", 6)
AXES = (N, C, H, W)
RAW = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
X = hax.NamedArray(jnp.asarray(RAW), AXES)


@settings(max_examples=20)
@given(st.permutations(range(4)))
def test_rearrange_sequence_equals_transpose(perm):
    order = tuple(AXES[i] for i in perm)
    out = hax.rearrange(X, order)
    assert out.axes == order
    np.testing.assert_array_equal(np.asarray(out.array), RAW.transpose(perm))
    by_name = hax.rearrange(X, (order[0].name, ..., order[-1].name))
    assert by_name.axes[0] == order[0] and by_name.axes[-1] == order[-1]


@pytest.mark.parametrize(
    ("expression", "bindings", "expected_shape", "positional"),
    [
        ("N C H W -> N H W C", {}, {"N": 2, "H": 4, "W": 6, "C": 3}, lambda r: r.transpose(0, 2, 3, 1)),
        ("n c h w -> n h w c", {}, {"N": 2, "H": 4, "W": 6, "C": 3}, lambda r: r.transpose(0, 2, 3, 1)),
        ("N C ... -> N ... C", {}, {"N": 2, "H": 4, "W": 6, "C": 3}, lambda r: r.transpose(0, 2, 3, 1)),
        ("{H W} -> ... W H", {}, {"N": 2, "C": 3, "W": 6, "H": 4}, lambda r: r.transpose(0, 1, 3, 2)),
        ("{W C H N} -> N H W C", {}, {"N": 2, "H": 4, "W": 6, "C": 3}, lambda r: r.transpose(0, 2, 3, 1)),
        (
            "... (a b) -> ... b a",
            {"a": 2},
            {"N": 2, "C": 3, "H": 4, "b": 3, "a": 2},
            lambda r: r.reshape(2, 3, 4, 2, 3).transpose(0, 1, 2, 4, 3),
        ),
        (
            "{(W: p W) H ...} -> ... (M: p H) W",
            {"W": 3},
            {"N": 2, "C": 3, "M": 8, "W": 3},
            lambda r: r.reshape(2, 3, 4, 2, 3).transpose(0, 1, 3, 2, 4).reshape(2, 3, 8, 3),
        ),
        (
            "n c h w -> (B: n c) h w",
            {"B": "batch"},
            {"batch": 6, "H": 4, "W": 6},
            lambda r: r.reshape(6, 4, 6),
        ),
    ],
)
def test_rearrange_expressions(expression, bindings, expected_shape, positional):
    out = hax.rearrange(X, expression, **bindings)
    assert out.shape == expected_shape
    np.testing.assert_array_equal(np.asarray(out.array), positional(RAW))


@pytest.mark.parametrize(
    ("expression", "bindings", "message"),
    [
        ("N C H -> N C H", {}, "captures"),
        ("N C H W -> N C H", {}, "missing from the rhs"),
        ("N C H W -> N C H W Q", {}, "not bound"),
        ("N C H W -> N C (H W)", {}, "need a name"),
        ("{H} -> H", {}, "add '...'"),
        ("(a b) ... -> a b ...", {}, "all but one"),
        ("(a b) ... -> a b ...", {"a": 3}, "cannot split"),
        ("N C H W -> N C H W W", {}, "twice"),
        ("{Z} -> ...", {}, "'Z' not found"),
        ("N C H W -> {N C H W}", {}, "unordered"),
        ("N C H W -> N C H W ? ", {}, "Cannot parse"),
    ],
)
def test_rearrange_errors(expression, bindings, message):
    with pytest.raises(ValueError, match=message):
        hax.rearrange(X, expression, **bindings)


def test_flatten_unflatten_round_trip_and_ravel():
    flat = hax.flatten_axes(X, ("H", "W"), "pixels")
    assert flat.axes == (N, C, hax.Axis("pixels", 24))
    np.testing.assert_array_equal(np.asarray(flat.array), RAW.reshape(2, 3, 24))
    back = hax.unflatten_axis(flat, "pixels", (H, W))
    np.testing.assert_array_equal(np.asarray(back.array), RAW)
    swapped = hax.flatten_axes(X, ("W", "N"), "wn")
    np.testing.assert_array_equal(np.asarray(swapped.array), RAW.transpose(3, 0, 1, 2).reshape(12, 3, 4))
    assert hax.ravel(X, "all").shape == {"all": 144}
    with pytest.raises(ValueError, match="does not match"):
        hax.unflatten_axis(flat, "pixels", (H, H.resize(5)))


def test_split_unbind_stack_concatenate():
    parts = hax.split(X, "W", [W.resize(2), hax.Axis("rest", 4)])
    np.testing.assert_array_equal(np.asarray(parts[0].array), RAW[..., :2])
    assert parts[1].axes == (N, C, H, hax.Axis("rest", 4))
    slices = hax.unbind(X, "C")
    assert len(slices) == 3 and slices[1].axes == (N, H, W)
    np.testing.assert_array_equal(np.asarray(slices[1].array), RAW[:, 1])
    stacked = hax.stack("C", slices)
    np.testing.assert_array_equal(np.asarray(hax.rearrange(stacked, AXES).array), RAW)
    joined = hax.concatenate("W", [X, hax.rearrange(X, (W, H, C, N))])
    assert joined.axes == (N, C, H, W.resize(12))
    np.testing.assert_array_equal(np.asarray(joined.array), np.concatenate([RAW, RAW], axis=3))
    with pytest.raises(ValueError, match="sum to 5"):
        hax.split(X, "W", [W.resize(5)])
    with pytest.raises(ValueError, match="same axes"):
        hax.stack("s", [X, slices[0]])


def test_basic_indexing_both_syntaxes():
    assert X["N", 1].axes == (C, H, W)
    np.testing.assert_array_equal(np.asarray(X["N", 1, "W", 2:5].array), RAW[1, :, :, 2:5])
    np.testing.assert_array_equal(np.asarray(X[{"H": 1, "C": slice(0, 2)}].array), RAW[:, 0:2, 1])
    scalar = X["N", 1, "C", 2, "H", 3, "W", 4]
    assert isinstance(scalar, jax.Array) and scalar == RAW[1, 2, 3, 4]
    # a 1-d unnamed index takes the name of the first kept axis of its size (here N: one W per N)
    per_n = X["W", jnp.array([5, 0])]
    assert per_n.axes == (N, C, H)
    np.testing.assert_array_equal(np.asarray(per_n.array), RAW[[0, 1], :, :, [5, 0]])
    np.testing.assert_array_equal(
        np.asarray(X["W", jnp.array([5, 0, 1, 2, 3])].array), RAW[..., [5, 0, 1, 2, 3]]
    )
    np.testing.assert_array_equal(np.asarray(X["H", [1, 2]].array), RAW[:, :, [1, 2]])
    np.testing.assert_array_equal(np.asarray(X["H", jnp.int32(2)].array), RAW[:, :, 2])


def test_dynamic_slices_inside_jit():
    @jax.jit
    def f(x, i):
        return x["W", hax.ds(i, 3)], x["W", hax.dblock(i, 2)]

    a, b = f(X, 1)
    np.testing.assert_array_equal(np.asarray(a.array), RAW[..., 1:4])
    np.testing.assert_array_equal(np.asarray(b.array), RAW[..., 2:4])
    piece = hax.slice(X, "W", start=2, length=3)
    np.testing.assert_array_equal(np.asarray(piece.array), RAW[..., 2:5])
    assert hax.slice(X, "W", new_axis=hax.Axis("w2", 2), start=1).axes[-1] == hax.Axis("w2", 2)


def test_advanced_indexing_follows_haliax_docs():
    I1, I2, I3 = hax.Axis("I1", 5), hax.Axis("I2", 2), hax.Axis("I3", 3)
    ind1 = hax.named(jnp.array([0, 1, 1, 0, 1]), I1)
    ind2 = hax.named(jnp.array([[0, 1, 2], [3, 2, 1]]), (I2, I3))
    assert X[{"N": ind1}].axes == (I1, C, H, W)
    both = X[{"N": ind1, "H": ind2}]
    assert both.axes == (I1, I2, I3, C, W)
    expected = RAW[np.asarray(ind1.array)[:, None, None], :, np.asarray(ind2.array)[None], :]
    np.testing.assert_array_equal(np.asarray(both.array), expected)
    later = X[{"W": ind2}]
    assert later.axes == (N, C, H, I2, I3)
    same_name = X[{"N": hax.named(jnp.array([1, 0, 1]), "N"), "C": 0}]
    assert same_name.axes == (N.resize(3), H, W)
    per_n = X[{"H": hax.named(jnp.array([3, 1]), "N")}]  # N is kept, so it is a batch axis
    assert per_n.axes == (N, C, W)
    np.testing.assert_array_equal(np.asarray(per_n.array), RAW[[0, 1], :, [3, 1], :])
    with pytest.raises(ValueError, match="'N' has sizes 2 and 3"):
        X[{"H": hax.named(jnp.array([0, 1, 2]), "N")}]


def test_take_and_take_along():
    idx = hax.named(jnp.array([2, 0]), "pick")
    taken = hax.take(X, "H", idx)
    assert taken.axes == (N, C, hax.Axis("pick", 2), W)
    np.testing.assert_array_equal(np.asarray(taken.array), RAW[:, :, [2, 0]])
    per_row = hax.named(jnp.array([[1, 5, 0], [2, 2, 3]]), (N, C))
    along = hax.take(X, "W", per_row)
    assert along.axes == (N, C, H)
    expected = np.take_along_axis(RAW, np.asarray(per_row.array)[:, :, None, None], axis=3)[..., 0]
    np.testing.assert_array_equal(np.asarray(along.array), expected)
    np.testing.assert_array_equal(np.asarray(hax.take(X, "C", 1).array), RAW[:, 1])


def test_at_updates():
    zeros = hax.zeros(AXES)
    updated = zeros.at["N", 1].set(1.0)
    expected = np.zeros_like(RAW)
    expected[1] = 1.0
    np.testing.assert_array_equal(np.asarray(updated.array), expected)
    row = hax.arange(W, dtype=jnp.float32)
    added = zeros.at[{"N": 0, "C": 2, "H": hax.ds(1, 2)}].add(row)
    expected = np.zeros_like(RAW)
    expected[0, 2, 1:3] += np.arange(6)
    np.testing.assert_array_equal(np.asarray(added.array), expected)
    idx = hax.named(jnp.array([0, 0, 5]), "k")
    counts = hax.zeros(W).at["W", idx].add(1.0)
    assert counts.array.tolist() == [2, 0, 0, 0, 0, 1]
    assert X.at["N", 1].get().axes == (C, H, W)
    np.testing.assert_array_equal(np.asarray(X.at["N", 0].multiply(0.0).array)[0], 0)
    np.testing.assert_array_equal(np.asarray(X.at["N", 0].max(1e9).array)[0], 1e9)


def test_updated_slice():
    patch = hax.ones((H.resize(2), C))
    out = hax.updated_slice(hax.zeros(AXES), {"H": 1, "N": 1}, patch)
    expected = np.zeros_like(RAW)
    expected[:, :, 1:3, :] = 1.0  # broadcast along the axes the update lacks, as in Haliax
    np.testing.assert_array_equal(np.asarray(out.array), expected)
    with pytest.raises(ValueError, match="not in the array"):
        hax.updated_slice(X, {"H": 0}, hax.ones(hax.Axis("Q", 1)))


@pytest.mark.parametrize(
    ("index", "error", "message"),
    [
        ((0,), TypeError, "Index a NamedArray by name"),
        (("Q", 0), ValueError, "'Q' not found"),
        ({"N": 0.5}, TypeError, "Unsupported index"),
        ({"N": jnp.zeros((2, 2), jnp.int32)}, ValueError, "0-d or 1-d"),
        ({"N": jnp.float32(1.0)}, TypeError, "integer"),
        (("N", 0, "N", 1), ValueError, "indexed twice"),
    ],
)
def test_index_errors(index, error, message):
    with pytest.raises(error, match=message):
        X[index]
