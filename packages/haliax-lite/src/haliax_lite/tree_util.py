"""Pytree helpers that treat NamedArrays as leaves (so functions see whole named arrays, not raw data).

>>> import haliax_lite as hax
>>> tree = {"w": hax.ones(hax.Axis("a", 2))}
>>> hax.tree_util.tree_map(lambda x: x * 2, tree)["w"].array.tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

from .axis import AxisSelector, axis_name
from .core import NamedArray, is_named_array

__all__ = [
    "BlockMappable",
    "resize_axis",
    "scan_aware_tree_map",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]


@runtime_checkable
class BlockMappable(Protocol):
    """Several blocks stored as one module (``hax.nn.Stacked``): ``map_blocks(fn)`` maps ``fn`` over the
    blocks, each seen without the stacking axis. :func:`scan_aware_tree_map` descends into these."""

    def map_blocks(self, fn: Callable[..., Any], *others: Any) -> Any: ...


def _leaf_or_named(is_leaf):
    if is_leaf is None:
        return is_named_array
    return lambda x: is_named_array(x) or is_leaf(x)


def tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """``jax.tree_util.tree_map`` with NamedArrays as leaves."""
    return jax.tree_util.tree_map(fn, tree, *rest, is_leaf=_leaf_or_named(is_leaf))


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, jax.tree_util.PyTreeDef]:
    """``jax.tree_util.tree_flatten`` with NamedArrays as leaves."""
    return jax.tree_util.tree_flatten(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    """``jax.tree_util.tree_leaves`` with NamedArrays as leaves."""
    return jax.tree_util.tree_leaves(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_structure(tree: Any, is_leaf: Callable | None = None) -> jax.tree_util.PyTreeDef:
    """``jax.tree_util.tree_structure`` with NamedArrays as leaves."""
    return jax.tree_util.tree_structure(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_unflatten(treedef: jax.tree_util.PyTreeDef, leaves: list) -> Any:
    """Inverse of :func:`tree_flatten`."""
    return jax.tree_util.tree_unflatten(treedef, leaves)


def resize_axis(tree: Any, old_axis: AxisSelector, new_size: int, key: jax.Array | None = None) -> Any:
    """Every NamedArray of ``tree`` with ``old_axis`` resized to ``new_size`` along it (as Haliax does).

    Shrinking truncates. Growing fills the new entries with the mean along the axis, or, given a ``key``,
    with draws from a normal truncated at ±3 with the mean and standard deviation along the axis (as when
    a vocabulary grows). Leaves without the axis are unchanged.

    >>> import haliax_lite as hax
    >>> V = hax.Axis("vocab", 2)
    >>> resize_axis({"w": hax.arange(V, dtype=float)}, "vocab", 3)["w"].array.tolist()
    [0.0, 1.0, 0.5]
    """
    name = axis_name(old_axis)
    leaves, treedef = tree_flatten(tree)
    keys = [None] * len(leaves) if key is None else list(jax.random.split(key, len(leaves)))

    def one(x, k):
        if not isinstance(x, NamedArray) or name not in x.shape:
            return x
        i = x.require_axis_indices(name)
        current = x.axes[i]
        if new_size <= current.size:
            return NamedArray(jax.lax.slice_in_dim(x.array, 0, new_size, axis=i), _resized(x, i, new_size))
        mean = jnp.mean(x.array, axis=i, keepdims=True)
        shape = x.array.shape[:i] + (new_size - current.size,) + x.array.shape[i + 1 :]
        fill = jnp.broadcast_to(mean, shape)
        if k is not None:
            std = jnp.std(x.array, axis=i, keepdims=True)
            fill = fill + std * jax.random.truncated_normal(k, -3, 3, shape, x.dtype)
        grown = jnp.concatenate([x.array, fill.astype(x.dtype)], axis=i)
        return NamedArray(grown, _resized(x, i, new_size))

    return tree_unflatten(treedef, [one(x, k) for x, k in zip(leaves, keys, strict=True)])


def _resized(x: NamedArray, i: int, size: int):
    return x.axes[:i] + (x.axes[i].resize(size),) + x.axes[i + 1 :]


def scan_aware_tree_map(fn: Callable, tree: Any, *rest: Any, is_leaf: Callable | None = None) -> Any:
    """:func:`tree_map`, except that inside a ``hax.nn.Stacked`` (any :class:`BlockMappable`) ``fn`` sees
    each block's arrays without the ``Block`` axis (it is vmapped over the blocks), as Haliax's version does.

    >>> import jax, haliax_lite as hax
    >>> L, E = hax.Axis("layers", 2), hax.Axis("embed", 3)
    >>> keys = jax.random.split(jax.random.PRNGKey(0), 2)
    >>> stack = hax.nn.Stacked.init(L, hax.nn.Linear)(E, E.alias("out"), key=keys)
    >>> seen = []
    >>> _ = scan_aware_tree_map(lambda x: seen.append(x.axes) or x, stack)
    >>> seen[0]
    (Axis(name='out', size=3), Axis(name='embed', size=3))
    """

    def is_leaf_or_stacked(x):
        return isinstance(x, BlockMappable) or (is_leaf is not None and is_leaf(x))

    def one(x, *others):
        if isinstance(x, BlockMappable):
            return x.map_blocks(lambda *blocks: scan_aware_tree_map(fn, *blocks, is_leaf=is_leaf), *others)
        return fn(x, *others)

    return tree_map(one, tree, *rest, is_leaf=is_leaf_or_stacked)
