"""Debugging helpers: find module mistakes Equinox does not catch, and print how arrays are sharded.

:func:`diagnose_common_issues` raises :class:`ModuleProblems` for an array stored in two places (it would
be trained as two parameters) or kept in a static field (it would be baked into the compiled program).
:func:`visualize_shardings` prints, for each array of a tree, which mesh axes each named axis is split
over, in text; it works inside ``jit`` too, where it reports the compiler's choice.

>>> import jax, jax.numpy as jnp, haliax_lite as hax
>>> x = hax.ones((hax.Axis("batch", 8), hax.Axis("embed", 2)))
>>> with jax.set_mesh(jax.make_mesh((len(jax.devices()),), ("data",))):
...     visualize_shardings({"x": hax.shard(x, {"batch": "data"})})
['x']: batch->data, embed->unsharded
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax

from .axis import Axis
from .core import NamedArray, is_named_array

__all__ = [
    "ModuleProblems",
    "describe_array",
    "diagnose_common_issues",
    "visualize_named_sharding",
    "visualize_shardings",
]


def _is_array(x) -> bool:
    return isinstance(x, NamedArray) or (hasattr(x, "shape") and hasattr(x, "dtype"))


def describe_array(arr: Any) -> str:
    """A one-line description of an array: its axes (or shape) and dtype.

    >>> import jax.numpy as jnp, haliax_lite as hax
    >>> describe_array(hax.zeros(hax.Axis("a", 2)))
    "NamedArray(axes=(Axis(name='a', size=2),), dtype=float32)"
    """
    if isinstance(arr, NamedArray):
        return f"NamedArray(axes={arr.axes}, dtype={arr.dtype})"
    return f"ndarray(shape={tuple(arr.shape)}, dtype={arr.dtype})"


class ModuleProblems(Exception):
    """What :func:`diagnose_common_issues` found: arrays at several paths, and arrays in static fields."""

    def __init__(self):
        super().__init__()
        self.reused_arrays: list[tuple[Any, list[str]]] = []
        self.static_arrays: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.reused_arrays or self.static_arrays)

    def __str__(self) -> str:
        if not self:
            return "No problems found"
        lines = ["Found some problems with your module:"]
        lines += [f"  Reused array {describe_array(a)} at paths {paths}" for a, paths in self.reused_arrays]
        lines += [f"  Static array at field {path}" for path in self.static_arrays]
        return "\n".join(lines)


def diagnose_common_issues(module: Any) -> None:
    """Raise :class:`ModuleProblems` if one array is stored at several paths of ``module`` (NamedArrays
    sharing their data count) or an array sits in a static field; then run ``equinox.tree_check``.

    >>> import equinox as eqx, haliax_lite as hax
    >>> class Tied(eqx.Module):
    ...     a: hax.NamedArray
    ...     b: hax.NamedArray
    >>> w = hax.zeros(hax.Axis("embed", 2))
    >>> diagnose_common_issues(Tied(w, w * 2))  # distinct arrays: no problem
    >>> diagnose_common_issues(Tied(w, w))
    Traceback (most recent call last):
    ...
    haliax_lite.debug.ModuleProblems: Found some problems with your module:
      Reused array NamedArray(axes=(Axis(name='embed', size=2),), dtype=float32) at paths ['.a', '.b']
    """
    problems = ModuleProblems()
    problems.reused_arrays.extend(_reused_arrays(module))
    problems.static_arrays.extend(_static_arrays(module, ""))
    if problems:
        raise problems
    eqx.tree_check(module)


def _reused_arrays(tree) -> list[tuple[Any, list[str]]]:
    seen: dict[int, tuple[Any, list[str]]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named_array)[0]:
        if _is_array(leaf):
            data = leaf.array if isinstance(leaf, NamedArray) else leaf
            seen.setdefault(id(data), (leaf, []))[1].append(jax.tree_util.keystr(path))
    return [(leaf, paths) for leaf, paths in seen.values() if len(paths) > 1]


def _static_arrays(node, path: str) -> list[str]:
    """Paths of arrays held in static fields of the modules in ``node``."""
    if isinstance(node, eqx.Module):
        found = []
        for f in dataclasses.fields(node):
            if not hasattr(node, f.name):
                continue
            value = getattr(node, f.name)
            if f.metadata.get("static", False) and _is_array(value):
                found.append(f"{path}.{f.name}")
            else:
                found += _static_arrays(value, f"{path}.{f.name}")
        return found
    if _is_array(node):
        return []
    children = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]
    if len(children) == 1 and children[0][1] is node:  # a leaf that is not an array
        return []
    return [p for key, child in children for p in _static_arrays(child, path + jax.tree_util.keystr(key))]


def _spec_part(part) -> str:
    if part is None:
        return "unsharded"
    return "+".join(part) if isinstance(part, (tuple, list)) else str(part)


def visualize_named_sharding(axes: Sequence[Axis], sharding: jax.sharding.Sharding) -> None:
    """Print ``name->mesh axes`` for each of ``axes`` under ``sharding`` (``unsharded`` if replicated).

    >>> import jax, haliax_lite as hax
    >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    >>> sharding = jax.sharding.NamedSharding(mesh, jax.P(None, "data"))
    >>> visualize_named_sharding((hax.Axis("batch", 4), hax.Axis("embed", 8)), sharding)
    batch->unsharded, embed->data
    """
    print(_describe_sharding(tuple(a.name for a in axes), sharding))


def _describe_sharding(
    names: Sequence[str], sharding: jax.sharding.Sharding, shape=None, typed_spec=None
) -> str:
    """``name->mesh axes`` per dimension; a sharding without a spec (the compiler's, inside ``jit``) is
    described by the trace-time spec when that names mesh axes, else by how many ways each dimension is
    split."""
    spec = getattr(sharding, "spec", None)
    if spec is None and typed_spec is not None and any(p is not None for p in typed_spec):
        spec = typed_spec
    if spec is None and shape is not None:
        pieces = [n // m if m else 1 for n, m in zip(shape, sharding.shard_shape(tuple(shape)), strict=True)]
        parts = ["unsharded" if k == 1 else f"split {k} ways" for k in pieces]
    else:
        spec = tuple(spec or ())
        parts = [_spec_part(spec[i] if i < len(spec) else None) for i in range(len(names))]
    return ", ".join(f"{name}->{part}" for name, part in zip(names, parts, strict=True))


def visualize_shardings(tree: Any) -> None:
    """Print one line per array of ``tree``: its path, then each axis and the mesh axes it is split over.

    Plain arrays name their dimensions ``dim0``, ``dim1``, ... Inside ``jit`` the lines are printed when
    the function is compiled, with the shardings the compiler chose.
    """
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_named_array)[0]:
        if not _is_array(leaf):
            continue
        if isinstance(leaf, NamedArray):
            data, names = leaf.array, tuple(a.name for a in leaf.axes)
        else:
            data, names = leaf, tuple(f"dim{i}" for i in range(len(leaf.shape)))
        where = jax.tree_util.keystr(path) or "<root>"
        typed_spec = getattr(getattr(jax.typeof(data), "sharding", None), "spec", None)

        def show(sharding, where=where, names=names, shape=tuple(data.shape), typed_spec=typed_spec):
            print(f"{where}: {_describe_sharding(names, sharding, shape, typed_spec)}")

        jax.debug.inspect_array_sharding(data, callback=show)
