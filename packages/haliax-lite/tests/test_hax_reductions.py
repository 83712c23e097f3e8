"""Reductions (with where=), axis-wise scans and the other axis ops equal their positional meaning."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

AXES = (hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4))
REDUCTIONS = [
    "sum",
    "mean",
    "max",
    "min",
    "prod",
    "std",
    "var",
    "any",
    "all",
    "logsumexp",
    "nansum",
    "nanmean",
]


def _array(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=[a.size for a in AXES]).astype(dtype)
    return raw, hax.NamedArray(jnp.asarray(raw), AXES)


@settings(max_examples=30)
@given(
    st.sampled_from(REDUCTIONS),
    st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_reduction_equals_numpy(name, names, use_where, seed):
    raw, x = _array(seed)
    if name in ("any", "all"):
        raw = raw > 0
    axis = tuple(names) if names else None
    positions = tuple(AXES.index(x.resolve_axis(n)) for n in names) if names else None
    where = None
    if use_where:
        where = np.random.default_rng(seed + 1).uniform(size=(3, 4)) > 0.3
        where[0, 0] = True  # every slice keeps at least one element
        where[:, 0] = True
    out, expected = reduced_and_reference(name, axis, positions, raw, where)
    expected_axes = tuple(a for a in AXES if names and a.name not in names)
    assert out.axes == expected_axes
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(expected), rtol=2e-5, atol=1e-5)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))  # one program per example, for speed
def reduced_and_reference(name, axis, positions, raw, where):
    kwargs, np_kwargs = {}, {}
    if where is not None:
        kwargs["where"] = hax.named(where, AXES[1:])
        np_kwargs["where"] = jnp.broadcast_to(where, raw.shape)
        if name in ("max", "min"):
            np_kwargs["initial"] = -np.inf if name == "max" else np.inf
    jnp_fn = jax_nn_logsumexp if name == "logsumexp" else getattr(jnp, name)
    out = getattr(hax, name)(hax.named(raw, AXES), axis=axis, **kwargs)
    return out, jnp_fn(raw, axis=positions, **np_kwargs)


def jax_nn_logsumexp(x, axis=None, where=None):
    import jax

    return jax.nn.logsumexp(x, axis=axis, where=where)


def test_where_for_max_uses_the_identity_of_the_dtype():
    x = hax.named(jnp.array([[1, 5], [7, 2]]), ("a", "b"))
    mask = hax.named(jnp.array([True, False]), "b")
    assert hax.max(x, "b", where=mask).array.tolist() == [1, 7]
    assert hax.min(x, "a", where=x > 1).array.tolist() == [7, 2]


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name):
    raw, x = _array(3)
    out = getattr(hax, name)(x, "b")
    assert out.axes == (AXES[0], AXES[2])
    np.testing.assert_array_equal(np.asarray(out.array), getattr(np, name)(raw, axis=1))
    assert getattr(hax, name)(x, None).item() == getattr(np, name)(raw)


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "sort", "argsort"])
@pytest.mark.parametrize("axis", ["a", "c"])
def test_axis_wise_ops_keep_axes(name, axis):
    raw, x = _array(4)
    out = getattr(hax, name)(x, axis)
    assert out.axes == AXES
    np.testing.assert_allclose(
        np.asarray(out.array), getattr(np, name)(raw, axis="ac".index(axis) * 2), rtol=1e-5
    )


def test_tril_triu_trace():
    raw, x = _array(5)
    y = hax.rearrange(x, ("c", "a", "b"))
    lower = hax.tril(y, "a", "b", k=1)
    assert lower.axes == y.axes
    planes = raw.transpose(2, 0, 1)  # (c, a, b): numpy's triangles act on the last two dimensions
    np.testing.assert_allclose(np.asarray(lower.array), np.tril(planes, k=1))
    upper = hax.triu(x, "a", "b")  # x is (a, b, c): as in Haliax, the pair goes last
    assert [a.name for a in upper.axes] == ["c", "a", "b"]
    np.testing.assert_allclose(np.asarray(upper.array), np.triu(planes))
    np.testing.assert_allclose(
        np.asarray(hax.trace(x, "a", "b").array), np.trace(raw, axis1=0, axis2=1), rtol=1e-6
    )
    with pytest.raises(ValueError, match="two different axes"):
        hax.tril(x, "a", "a")


def test_roll_and_pad():
    raw, x = _array(6)
    np.testing.assert_allclose(np.asarray(hax.roll(x, 1, "b").array), np.roll(raw, 1, axis=1))
    np.testing.assert_allclose(
        np.asarray(hax.roll(x, (1, -2), ("a", "c")).array), np.roll(raw, (1, -2), (0, 2))
    )
    padded = hax.pad(x, {"c": (1, 2), "a": 1}, constant_values=9.0)
    assert padded.shape == {"a": 4, "b": 3, "c": 7}
    np.testing.assert_allclose(
        np.asarray(padded.array), np.pad(raw, [(1, 1), (0, 0), (1, 2)], constant_values=9.0)
    )
    with pytest.raises(ValueError, match="negative width"):
        hax.pad(x, {"a": (-1, 0)})
    with pytest.raises(ValueError, match="'z' not found"):
        hax.pad(x, {"z": 1})


def test_top_k():
    raw, x = _array(7)
    values, indices = hax.top_k(x, "c", 2, new_axis="top")
    assert values.axes == (AXES[0], AXES[1], hax.Axis("top", 2)) == indices.axes
    np.testing.assert_allclose(np.asarray(values.array), -np.sort(-raw, axis=2)[..., :2])
    np.testing.assert_array_equal(
        np.take_along_axis(raw, np.asarray(indices.array), 2), np.asarray(values.array)
    )
    with pytest.raises(ValueError, match="k=5"):
        hax.top_k(x, "c", 5)


def test_reducing_a_missing_axis_names_the_axes():
    _, x = _array(8)
    with pytest.raises(ValueError, match=r"'z' not found in array with axes"):
        hax.sum(x, "z")


@settings(max_examples=15)
@given(
    st.sampled_from(["sum", "max", "min", "prod", "mean"]),
    st.sampled_from([np.int32, np.float16, np.uint8]),
    st.lists(st.sampled_from(["a", "b", "c"]), unique=True, min_size=1, max_size=2),
)
def test_reductions_keep_jnp_dtype_semantics(name, dtype, names):
    raw = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    x = hax.NamedArray(jnp.asarray(raw), AXES)
    positions = tuple(sorted("abc".index(n) for n in names))
    out = getattr(hax, name)(x, axis=tuple(names))
    expected = getattr(jnp, name)(jnp.asarray(raw), axis=positions)
    assert out.dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(out.array, np.float64), np.asarray(expected, np.float64), rtol=1e-3)


PLAIN = np.arange(12.0).reshape(3, 4) - 5.0


@pytest.mark.parametrize(
    "name", ["sum", "mean", "max", "min", "prod", "std", "var", "any", "all", "ptp", "nansum"]
)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
def test_a_plain_array_reduces_as_jax_numpy_does(name, axis):
    expected = getattr(jnp, name)(PLAIN, axis=axis)
    np.testing.assert_array_equal(getattr(hax, name)(jnp.asarray(PLAIN), axis=axis), expected)


@pytest.mark.parametrize("name", ["argmax", "argmin", "cumsum", "cumprod", "sort", "argsort"])
def test_plain_arrays_go_through_the_axis_wise_functions_too(name):
    np.testing.assert_array_equal(
        getattr(hax, name)(jnp.asarray(PLAIN), 1), getattr(jnp, name)(PLAIN, axis=1)
    )


def test_predicates_take_scalars_comparisons_and_masks_as_haliax_does():
    assert bool(hax.all(jnp.asarray(PLAIN) > -6)) and not bool(hax.all(jnp.asarray(PLAIN) > 0))
    assert bool(hax.any(True)) and not bool(hax.any(False)) and bool(hax.all(np.bool_(True)))
    np.testing.assert_array_equal(
        hax.sum(jnp.asarray(PLAIN), where=PLAIN > 0), jnp.sum(PLAIN, where=PLAIN > 0)
    )
    assert bool(jax.jit(lambda x: hax.all(x > 0))(jnp.ones(3)))


def test_a_pytree_is_reduced_leaf_by_leaf():
    X = hax.Axis("x", 3)
    out = hax.sum({"named": hax.arange(X), "plain": jnp.ones(4)})
    assert out["named"].axes == () and out["named"].item() == 3
    assert out["plain"].item() == 4.0


def test_a_name_on_a_plain_array_and_keepdims_are_refused():
    with pytest.raises(
        TypeError, match=r"hax\.sum: axis 'batch' names an axis, but the array is not a NamedArray"
    ):
        hax.sum(jnp.ones(3), "batch")
    with pytest.raises(ValueError, match="keepdims is not supported"):
        hax.sum(hax.ones(hax.Axis("x", 2)), "x", keepdims=True)
