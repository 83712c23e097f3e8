"""Pytree helpers that treat NamedArrays as leaves (so functions see whole named arrays, not raw data).

>>> import haliax_lite as hax
>>> tree = {"w": hax.ones(hax.Axis("a", 2))}
>>> hax.tree_util.tree_map(lambda x: x * 2, tree)["w"].array.tolist()
[2.0, 2.0]
"""

from __future__ import annotations

import jax

from .core import is_named_array

__all__ = ["tree_flatten", "tree_leaves", "tree_map", "tree_structure", "tree_unflatten"]


def _leaf_or_named(is_leaf):
    if is_leaf is None:
        return is_named_array
    return lambda x: is_named_array(x) or is_leaf(x)


def tree_map(fn, tree, *rest, is_leaf=None):
    """``jax.tree_util.tree_map`` with NamedArrays as leaves."""
    return jax.tree_util.tree_map(fn, tree, *rest, is_leaf=_leaf_or_named(is_leaf))


def tree_flatten(tree, is_leaf=None):
    """``jax.tree_util.tree_flatten`` with NamedArrays as leaves."""
    return jax.tree_util.tree_flatten(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_leaves(tree, is_leaf=None):
    """``jax.tree_util.tree_leaves`` with NamedArrays as leaves."""
    return jax.tree_util.tree_leaves(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_structure(tree, is_leaf=None):
    """``jax.tree_util.tree_structure`` with NamedArrays as leaves."""
    return jax.tree_util.tree_structure(tree, is_leaf=_leaf_or_named(is_leaf))


def tree_unflatten(treedef, leaves):
    """Inverse of :func:`tree_flatten`."""
    return jax.tree_util.tree_unflatten(treedef, leaves)
