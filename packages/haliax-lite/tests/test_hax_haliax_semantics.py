"""Behaviour that must match Haliax's (found by running Haliax code against haliax-lite): operators across
axis orders, gather/scatter with named selectors, dslice out of bounds, updated_slice, roll, triangles,
axis-less scans and the error messages of vmap/scan."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite import Axis, dslice

B, W, H = Axis("B", 2), Axis("W", 3), Axis("H", 4)


def _raw(x):
    return np.asarray(x.array if isinstance(x, hax.NamedArray) else x)


OPERATORS = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / (b + 1),
    "&": lambda a, b: (a > 3) & (b > 3),
    "where": lambda a, b: hax.where(a > b, a, b),
    "maximum": hax.maximum,
    "isclose": hax.isclose,
}


@functools.partial(jax.jit, static_argnums=(0, 1, 2))  # one program per drawn orders and operator, for speed
def operated_and_reference(order_a, order_b, op, base, other):
    a = hax.named(base, (B, W, H)).rearrange(order_a)
    b = hax.named(other, (B, W, H)).rearrange(order_b)
    expected = OPERATORS[op](hax.named(base, (B, W, H)), hax.named(other, (B, W, H)))
    out = OPERATORS[op](a, b)
    return out, out.rearrange((B, W, H)), expected


@settings(max_examples=25)
@given(st.permutations([B, W, H]), st.permutations([B, W, H]), st.sampled_from(sorted(OPERATORS)))
def test_operators_align_by_name_whatever_the_axis_order(order_a, order_b, op):
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 7
    other = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 5) % 11
    out, aligned, expected = operated_and_reference(tuple(order_a), tuple(order_b), op, base, other)
    assert out.axes == tuple(order_a)
    np.testing.assert_array_equal(_raw(aligned), _raw(expected))


def _take_along(src: hax.NamedArray, axis: Axis, idx: hax.NamedArray) -> np.ndarray:
    """The reference gather: broadcast idx to src without ``axis``, then take_along_axis."""
    others = tuple(a for a in src.axes if a != axis)
    extra = tuple(a for a in idx.axes if a not in others)
    moved = src.rearrange((*others, axis)).broadcast_axis(extra).rearrange((*others, *extra, axis))
    full = hax.broadcast_to(idx, others + extra)
    return np.take_along_axis(_raw(moved), _raw(full)[..., None], axis=-1)[..., 0]


def test_selector_sharing_kept_axes_gathers_per_position():
    Batch, Seq, Vocab = Axis("batch", 4), Axis("seq", 3), Axis("vocab", 7)
    x = hax.arange((Batch, Seq, Vocab))
    idx = hax.arange((Batch, Seq), dtype=jnp.int32) % Vocab.size
    out = x["vocab", idx]
    assert out.axes == (Batch, Seq)
    np.testing.assert_array_equal(_raw(out), _take_along(x, Vocab, idx))


def test_selector_that_adds_an_axis():
    Batch, Seq, Vocab, Step = Axis("batch", 2), Axis("seq", 3), Axis("vocab", 5), Axis("step", 4)
    logits = hax.arange((Batch, Seq, Vocab))
    idx = hax.arange((Batch, Step), dtype=jnp.int32) % Vocab.size
    out = logits["vocab", idx]
    assert set(out.axes) == {Batch, Seq, Step}
    expected = _raw(logits)[np.arange(2)[:, None, None], np.arange(3)[None, :, None], _raw(idx)[:, None, :]]
    np.testing.assert_array_equal(_raw(out.rearrange((Batch, Seq, Step))), expected)


def test_two_selectors_contiguous_and_not():
    Batch, X, Y, Z = Axis("batch", 3), Axis("x", 5), Axis("y", 7), Axis("z", 2)
    a = hax.arange((Batch, X, Y))
    ix, iy = hax.arange(Batch, dtype=jnp.int32) % 5, hax.arange(Batch, dtype=jnp.int32) % 7
    out = a["x", ix, "y", iy]
    assert out.axes == (Batch,)
    np.testing.assert_array_equal(_raw(out), _raw(a)[np.arange(3), _raw(ix), _raw(iy)])
    b = hax.arange((Batch, X, Z, Y))
    out = b["x", ix, "y", iy]
    assert out.axes == (Batch, Z)  # not contiguous: the selector axes go in front
    np.testing.assert_array_equal(_raw(out), _raw(b)[np.arange(3), _raw(ix), :, _raw(iy)])


def test_selectors_mixed_with_integers_and_dslice():
    Batch, C, V = Axis("batch", 3), Axis("channel", 2), Axis("vocab", 6)
    x = hax.arange((Batch, C, V))
    idx = hax.arange(Batch, dtype=jnp.int32) % V.size
    out = x["channel", 1, "vocab", idx]
    assert out.axes == (Batch,)
    np.testing.assert_array_equal(_raw(out), _raw(x)[:, 1, :][np.arange(3), _raw(idx)])
    S = Axis("seq", 5)
    y = hax.arange((Batch, S, V))
    per_pos = (hax.arange((Batch, S), dtype=jnp.int32) + 2) % 4
    out = y["vocab", dslice(0, 4)]["vocab", per_pos]
    assert out.axes == (Batch, S)
    np.testing.assert_array_equal(
        _raw(out), np.take_along_axis(_raw(y)[..., :4], _raw(per_pos)[..., None], -1)[..., 0]
    )


def test_broadcasting_selectors_and_plain_ndarrays():
    Batch, Vocab, K, J = Axis("batch", 3), Axis("vocab", 5), Axis("k", 2), Axis("j", 4)
    x = hax.arange((Batch, Vocab))
    plain = x["vocab", jnp.array([0, 2, 4])]  # a 1-d array of the batch size is a per-batch selector
    assert plain.axes == (Batch,)
    np.testing.assert_array_equal(_raw(plain), _raw(x)[np.arange(3), [0, 2, 4]])
    y = hax.arange((Axis("r", 6), Vocab))
    ik = hax.named(jnp.array([1, 4]), K)
    ij = hax.named(jnp.array([0, 1, 2, 3]), J)
    both = y["r", ij, "vocab", ik]
    assert set(both.axes) == {K, J}
    expected = _raw(y)[_raw(ij)[None, :], _raw(ik)[:, None]]
    np.testing.assert_array_equal(_raw(both.rearrange((K, J))), expected)


def test_dslice_reads_past_the_end_as_zeros_and_keeps_haliax_axis_order():
    D, Wd = Axis("D", 10), Axis("Wd", 3)
    x = hax.arange((H, D, Wd)) + 1
    tail = x["D", dslice(8, 4)]
    assert tail.axes == (H, D.resize(4), Wd)
    np.testing.assert_array_equal(_raw(tail)[:, :2], _raw(x)[:, 8:])
    np.testing.assert_array_equal(_raw(tail)[:, 2:], 0)
    both = x["H", dslice(0, 2), "D", dslice(3, 7)]
    assert both.axes == (H.resize(2), D.resize(7), Wd)
    np.testing.assert_array_equal(_raw(both), _raw(x)[0:2, 3:10])

    @jax.jit
    def window(x, start):
        return x["D", dslice(start, 4)]

    np.testing.assert_array_equal(_raw(window(x, 7))[:, :3], _raw(x)[:, 7:])
    np.testing.assert_array_equal(_raw(window(x, 7))[:, 3], 0)


def test_scatter_with_selectors_and_dslice_drops_out_of_bounds_writes():
    Batch, Seq, Vocab = Axis("batch", 2), Axis("seq", 3), Axis("vocab", 5)
    idx = hax.arange((Batch, Seq), dtype=jnp.int32) % Vocab.size
    added = hax.zeros((Batch, Seq, Vocab)).at[{Vocab: idx}].add(hax.ones((Batch, Seq)))
    expected = np.zeros((2, 3, 5))
    expected[np.arange(2)[:, None], np.arange(3)[None], _raw(idx)] += 1
    np.testing.assert_array_equal(_raw(added), expected)
    per_batch = hax.named(jnp.array([1, 4]), Batch)
    row = hax.zeros((Batch, Vocab)).at[{Vocab: per_batch}].set(hax.ones(Batch) * 9)
    np.testing.assert_array_equal(_raw(row), [[0, 9, 0, 0, 0], [0, 0, 0, 0, 9]])
    doubled = hax.ones((Batch, Vocab)).at["batch", 1, "vocab", per_batch].mul(2.0)
    np.testing.assert_array_equal(_raw(doubled), [[1, 1, 1, 1, 1], [1, 2, 1, 1, 2]])
    written = (
        hax.zeros(Vocab).at["vocab", dslice(3, 4)].set(hax.arange(Vocab.resize(4), dtype=jnp.float32) + 1)
    )
    np.testing.assert_array_equal(_raw(written), [0, 0, 0, 1, 2])


def test_updated_slice_ragged_tokens_and_bounds():
    Batch, Pos, Embed = Axis("batch", 3), Axis("pos", 6), Axis("embed", 2)
    cache = hax.zeros((Batch, Pos, Embed))
    positions = hax.named(jnp.array([0, 2, 5]), Batch)
    token = hax.ones((Batch, Pos.resize(1), Embed)) * hax.arange(Batch, start=1.0).broadcast_axis(Embed)
    out = hax.updated_slice(cache, {"pos": positions}, token)
    assert out.axes == cache.axes
    expected = np.zeros((3, 6, 2))
    for b, p in enumerate([0, 2, 5]):
        expected[b, p] = b + 1
    np.testing.assert_array_equal(_raw(out), expected)
    two = hax.updated_slice(
        cache, {"pos": hax.named(jnp.array([1, 3, 0]), Batch)}, hax.ones((Pos.resize(2), Embed))
    )
    np.testing.assert_array_equal(_raw(two).sum(axis=(1, 2)), [4, 4, 4])
    with pytest.raises(ValueError, match=r"does not fit in axis 'pos' of size 6; use a start in \[0, 4\]"):
        hax.updated_slice(cache, {"pos": 5}, hax.ones(Pos.resize(2)))
    clamped = jax.jit(lambda c, s: hax.updated_slice(c, {"pos": s}, hax.ones(Pos.resize(2))))(cache, 5)
    np.testing.assert_array_equal(_raw(clamped)[:, 4:], 1)  # a traced start is clamped so the update fits
    assert _raw(clamped).sum() == 3 * 2 * 2  # broadcast along batch and embed, which the update lacks
    single = hax.updated_slice(cache, {"pos": 1, "batch": 2, "embed": 1}, 7.0)
    assert _raw(single)[2, 1, 1] == 7 and _raw(single).sum() == 7
    with pytest.raises(ValueError, match="lacks"):
        hax.updated_slice(cache, {"pos": hax.named(jnp.array([0, 1]), "other")}, hax.ones(Pos.resize(1)))


def test_roll_with_a_named_shift():
    x = hax.arange((W, B))
    by_scalar = hax.roll(x, hax.named(jnp.asarray(1), ()), "W")
    np.testing.assert_array_equal(_raw(by_scalar), np.roll(_raw(x), 1, axis=0))
    per_b = hax.roll(x, hax.named(jnp.array([0, 2]), B), "W")
    assert per_b.axes == (W, B)
    np.testing.assert_array_equal(_raw(per_b)[:, 1], np.roll(_raw(x)[:, 1], 2))
    np.testing.assert_array_equal(_raw(per_b)[:, 0], _raw(x)[:, 0])
    with pytest.raises(ValueError, match="also rolled"):
        hax.roll(x, hax.named(jnp.array([0, 1, 2]), W), "W")


@functools.partial(jax.jit, static_argnums=(0, 1, 2))  # one program per drawn order, pair and k, for speed
def triangles(order, pair, k):
    base = hax.arange((B, W, H), dtype=jnp.float32) + 1
    x = base.rearrange(order)
    rest = tuple(a for a in (B, W, H) if a not in pair)
    outs = [named_fn(x, *pair, k=k) for named_fn in (hax.tril, hax.triu)]
    return x, base.rearrange((*rest, *pair)), [(out, out.rearrange((*rest, *pair))) for out in outs]


@settings(max_examples=20)
@given(st.permutations([B, W, H]), st.sampled_from([(W, H), (H, W), (B, H), (H, B)]), st.integers(-2, 2))
def test_tril_triu_in_any_axis_order(order, pair, k):
    row, col = pair
    x, moved, outs = triangles(tuple(order), pair, k)
    for (out, aligned), np_fn in zip(outs, (np.tril, np.triu), strict=True):
        assert out.axes == (*(a for a in x.axes if a not in pair), row, col)  # Haliax: the pair goes last
        np.testing.assert_array_equal(_raw(aligned), np_fn(_raw(moved), k=k))


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "nancumsum", "sort", "argsort"])
def test_scans_without_an_axis_run_over_the_flattened_array(name):
    x = (hax.arange((B, W), dtype=jnp.float32) * 5) % 7  # distinct values: argsort has no ties
    out = getattr(hax, name)(x)
    assert isinstance(out, jax.Array) and out.shape == (6,)
    np.testing.assert_array_equal(np.asarray(out), getattr(np, name)(_raw(x), axis=None))
    along = getattr(hax, name)(x, "W")
    np.testing.assert_array_equal(_raw(along), getattr(np, name)(_raw(x), axis=1))


def test_vmap_and_scan_errors_name_the_argument_path_and_axis():
    with pytest.raises(
        ValueError, match=r"hax.vmap over axis 'B': argument args\[1\]\['w'\] \(axes \(B=3\)\)"
    ):
        hax.vmap(lambda x, y: x, B)(hax.ones(B), {"w": hax.ones(B.resize(3))})
    with pytest.raises(ValueError, match=r"hax.scan over axis 'B': argument kwargs\['y'\].*xs\[0\]"):
        hax.scan(lambda c, x, y: (c, x), "B")(0.0, hax.ones(B), y=jnp.ones(3))


def test_size_mismatch_messages_list_only_the_shapes_that_have_the_axis():
    with pytest.raises(
        ValueError, match=r"sizes 2 and 3 in shapes \(B=2\) and \(B=3\); the same name"
    ) as info:
        hax.dot(hax.ones(B), hax.ones(B.resize(3)), axis="B")
    assert "()" not in str(info.value)
