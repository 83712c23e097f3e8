"""Axis utilities, NamedArray construction and invariants, pytree behaviour, annotations and creation."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from haliax_lite import Axis

A, B, C = Axis("a", 2), Axis("b", 3), Axis("c", 4)


def test_axis_is_frozen_and_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        A.size = 3
    assert A.alias("z") == Axis("z", 2) and A.resize(5) == Axis("a", 5)
    with pytest.raises(ValueError, match="non-negative int"):
        Axis("a", -1)
    with pytest.raises(ValueError, match="non-empty string"):
        Axis("", 1)
    assert hax.make_axes(a=2, b=3) == (A, B)


def test_axis_utilities():
    assert hax.axis_name(A) == "a" and hax.axis_name((A, "b")) == ("a", "b")
    assert hax.axis_size((A, B)) == 6
    assert hax.eliminate_axes((A, B, C), ("b", A)) == (C,)
    with pytest.raises(ValueError, match=r"Axis 'z' not present"):
        hax.eliminate_axes((A, B), "z")
    assert hax.without_axes((A, B), ("z", "a")) == (B,)
    assert hax.selects_axis((A, B), "a") and not hax.selects_axis((A,), B)
    assert not hax.selects_axis((A,), A.resize(9))
    assert hax.replace_axis((A, B, C), "b", (Axis("x", 1), Axis("y", 2))) == (
        A,
        Axis("x", 1),
        Axis("y", 2),
        C,
    )
    with pytest.raises(ValueError, match="already present in axis spec"):
        hax.replace_axis((A, B), "b", A)
    assert hax.concat_axes(A, (B, C)) == (A, B, C)
    with pytest.raises(ValueError, match="Duplicate"):
        hax.concat_axes((A, B), B)
    assert hax.union_axes((A, B), (B, C)) == (A, B, C)
    with pytest.raises(ValueError, match="sizes"):
        hax.union_axes((A,), (A.resize(7),))
    assert hax.intersect_axes((A, B, C), ("c", "a")) == (A, C) == hax.overlapping_axes((A, B, C), (C, A))
    assert hax.is_axis_compatible(A, "a") and not hax.is_axis_compatible(A, A.resize(3))
    assert hax.ensure_tuple({"a": 2}) == (A,)


def test_named_array_shape_information():
    x = hax.named(jnp.zeros((2, 3), jnp.bfloat16), ("a", B))
    assert x.axes == (A, B) and x.shape == {"a": 2, "b": 3}
    assert (x.ndim, x.size, x.dtype) == (2, 6, jnp.bfloat16)
    assert x.resolve_axis("b") == B and x.resolve_axis(("b", "a")) == (B, A)
    assert x.axis_size(("a", "b")) == 6 and x.axis_size("a") == 2
    assert x.has_axis("a") and not x.has_axis(("a", "z"))
    assert x.astype(jnp.float32).dtype == jnp.float32
    assert hax.sum(x).scalar().shape == ()
    with pytest.raises(ValueError, match="no axes"):
        x.scalar()


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: hax.NamedArray(jnp.zeros((2, 3)), (A, C)), ValueError, r"shape \(2, 3\) does not match"),
        (lambda: hax.NamedArray(jnp.zeros((2, 2)), (A, A)), ValueError, "Duplicate axis names"),
        (lambda: hax.NamedArray(jnp.zeros(2), ("a",)), TypeError, "hax.named"),
        (lambda: hax.named(jnp.zeros((2, 3)), ("a",)), ValueError, "2 dimensions"),
        (lambda: hax.zeros(("a", "b")), ValueError, "Axis objects"),
        (lambda: hax.named(jnp.zeros((2, 3)), ("a", A.resize(3))), ValueError, "Duplicate"),
        (lambda: hax.zeros(A).resolve_axis(A.resize(5)), ValueError, "does not match"),
    ],
)
def test_bad_construction_raises_clear_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_named_array_is_a_pytree_with_static_axes():
    x = hax.ones((A, B))
    leaves, treedef = jax.tree_util.tree_flatten(x)
    assert len(leaves) == 1 and leaves[0].shape == (2, 3)
    assert jax.tree_util.tree_unflatten(treedef, leaves).axes == (A, B)
    doubled = jax.jit(lambda t: t * 2)(x)
    assert doubled.axes == (A, B) and float(doubled.array[0, 0]) == 2.0
    path = jax.tree_util.tree_flatten_with_path({"w": x})[0][0][0]
    assert jax.tree_util.keystr(path) == "['w'].array"
    params, static = eqx.partition({"w": x, "n": 3}, eqx.is_array)
    assert eqx.combine(params, static)["w"].axes == (A, B)
    with pytest.raises(AttributeError):
        x.axes = ()


def test_annotations_check_axis_names():
    x = hax.zeros((A, B, C))
    assert isinstance(x, hax.NamedArray["a b c"])
    assert not isinstance(x, hax.NamedArray["a c b"])
    assert isinstance(x, hax.NamedArray["a ..."]) and isinstance(x, hax.NamedArray["... c"])
    assert isinstance(x, hax.NamedArray["{c a ...}"]) and not isinstance(x, hax.NamedArray["{c a}"])
    assert isinstance(x, hax.NamedArray["{b c a}"]) and isinstance(x, hax.NamedArray["a", "b", "c"])
    assert not isinstance(jnp.zeros(3), hax.NamedArray["a"])


def test_creation_functions():
    assert hax.zeros((A, B)).dtype == jnp.float32 and hax.ones(A, dtype=jnp.int32).array.tolist() == [1, 1]
    assert hax.full(B, 7).array.tolist() == [7, 7, 7]
    filled = hax.full((A, B), hax.arange(B))
    assert filled.axes == (A, B) and filled.array.tolist() == [[0, 1, 2], [0, 1, 2]]
    x = hax.arange((A, B), start=1, step=2)
    assert x.array.tolist() == [[1, 3, 5], [7, 9, 11]]
    assert hax.zeros_like(x).array.sum() == 0 and hax.ones_like(x).dtype == x.dtype
    assert hax.full_like(x, 4.5, dtype=jnp.float32).array[0, 0] == 4.5
    np.testing.assert_allclose(np.asarray(hax.linspace(C, start=0.0, stop=1.0).array), np.linspace(0, 1, 4))
    np.testing.assert_allclose(np.asarray(hax.logspace(A, start=0.0, stop=2.0).array), [1, 100], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(hax.geomspace(B, start=1.0, stop=4.0).array), [1, 2, 4], rtol=1e-6)


def test_broadcast_to_and_broadcast_axis():
    row = hax.arange(B)
    full = hax.broadcast_to(row, (A, B))
    assert full.axes == (A, B) and full.array.tolist() == [[0, 1, 2]] * 2
    assert hax.broadcast_axis(row, A).axes == (A, B)
    assert hax.broadcast_to(3.0, (A,)).array.tolist() == [3.0, 3.0]
    with pytest.raises(ValueError, match="extra axes"):
        hax.broadcast_to(hax.zeros((A, B)), (B,))
    x, y = hax.broadcast_arrays(hax.zeros((A, B)), hax.ones(B))
    assert x.axes == y.axes == (A, B)
    kept = hax.broadcast_to(hax.zeros((B, A)), (A,), ensure_order=False, enforce_no_extra_axes=False)
    assert kept.axes == (B, A)


def test_tree_util_treats_named_arrays_as_leaves():
    tree = {"x": hax.ones(A), "y": [hax.zeros(B), 3]}
    leaves = hax.tree_util.tree_leaves(tree)
    assert [type(v).__name__ for v in leaves] == ["NamedArray", "NamedArray", "int"]
    mapped = hax.tree_util.tree_map(lambda v: v.axes if isinstance(v, hax.NamedArray) else v, tree)
    assert mapped["y"][0] == (B,)
    flat, treedef = hax.tree_util.tree_flatten(tree)
    assert hax.tree_util.tree_unflatten(treedef, flat)["x"].axes == (A,)
    assert hax.tree_util.tree_structure(tree) == treedef


def test_wrappers_and_methods_are_written_out_with_type_hints():
    """Tools see what readers see: every wrapper is a real function with hints, defined in its module."""
    import inspect

    from haliax_lite import binary, elementwise, reductions, unary
    from haliax_lite.named_array_methods import NamedArrayMethods

    for module in (unary, binary, elementwise, reductions):
        for name in module.__all__:
            fn = getattr(module, name)
            if isinstance(fn, type):  # the reduction Protocols
                continue
            assert fn.__module__ == module.__name__ and fn.__name__ == name, (module.__name__, name)
            assert "return" in fn.__annotations__, f"{module.__name__}.{name} has no return hint"
            assert f"def {name}(" in inspect.getsource(module)
    for name in ("sum", "cumsum", "rearrange", "dot", "__add__", "__radd__", "__eq__", "__neg__"):
        assert name in vars(NamedArrayMethods), name
        assert "return" in vars(NamedArrayMethods)[name].__annotations__


def test_reduction_protocols_describe_the_reductions():
    import typing

    def total(f: hax.ReductionFunction, x: hax.NamedArray) -> hax.NamedArray:
        return f(x, "a", where=x > 0)

    x = hax.arange((hax.Axis("a", 3), hax.Axis("b", 2)), dtype=float) - 2
    assert total(hax.sum, x).array.tolist() == [2.0, 4.0]
    assert typing.get_type_hints(hax.ReductionFunction.__call__)["return"] is hax.NamedArray
    assert hax.SimpleReductionFunction.__call__.__annotations__["return"] == "NamedArray"
