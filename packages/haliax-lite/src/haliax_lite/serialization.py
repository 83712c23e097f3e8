"""The state-dict protocol: a module's arrays by dotted name, repeated layers per layer (as Haliax).

A module decides its own names by subclassing :class:`ModuleWithStateDictSerialization` (Haliax's
protocol): ``_state_dict_key_map`` renames fields (``None`` drops a level), and ``iter_state_dict`` /
``from_state_dict`` may be overridden outright, as ``hax.nn.Stacked`` does to give each block its own names,
``{path}.{i}.{name in the block}``, the layout PyTorch and Hugging Face checkpoints use. ``iter_state_dict``
yields the entries lazily, one array at a time, so an exporter never holds two copies of a large model;
``from_state_dict`` fills a template from any mapping (a lazy reader of a file, say), reading each entry once.
A template whose abstract leaves carry shardings is read straight onto them: each device receives only its
slice, so a model too large for one device loads onto a mesh leaf by leaf.

>>> import jax, haliax_lite as hax
>>> Layers, Embed, Mlp = hax.Axis("layers", 2), hax.Axis("embed", 3), hax.Axis("mlp", 4)
>>> stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(Embed, Mlp, key=jax.random.split(jax.random.key(0), 2))
>>> sorted(to_state_dict({"blocks": stack}))
['blocks.0.bias', 'blocks.0.weight', 'blocks.1.bias', 'blocks.1.weight']
>>> back = from_state_dict({"blocks": stack}, to_state_dict({"blocks": stack}))
>>> bool((back["blocks"].stacked.weight.array == stack.stacked.weight.array).all())
True
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .core import NamedArray, is_named_array
from .host_placement import HostLeaf, host_value, place_from_host, target_sharding

__all__ = [
    "ModuleWithStateDictSerialization",
    "StateDict",
    "StateDictError",
    "fill_leaf",
    "from_state_dict",
    "iter_state_dict",
    "read_entry",
    "to_state_dict",
    "with_prefix",
]

StateDict = dict[str, Any]
"""A flat mapping from dotted names to arrays (Haliax's and PyTorch's layout)."""

T = TypeVar("T")


class StateDictError(ValueError):
    """A state dict that does not fit its template: a missing entry, or one of another shape."""


def with_prefix(prefix: str | None, leaf: str | None) -> str | None:
    """Join two optional dotted names, as state dict keys are joined.

    >>> with_prefix("model", "weight"), with_prefix(None, "weight"), with_prefix("model", None)
    ('model.weight', 'weight', 'model')
    """
    if prefix is None:
        return leaf
    if leaf is None:
        return prefix
    return f"{prefix}.{leaf}"


class ModuleWithStateDictSerialization(eqx.Module):
    """An Equinox module that names its own state-dict entries (Haliax's protocol).

    By default its dynamic fields are named after the fields, renamed by ``_state_dict_key_map``.

    >>> import jax.numpy as jnp
    >>> class Norm(ModuleWithStateDictSerialization):
    ...     scale: jnp.ndarray
    ...     def _state_dict_key_map(self):
    ...         return {"scale": "weight"}
    >>> list(to_state_dict(Norm(jnp.ones(2)), "ln"))
    ['ln.weight']
    """

    def _state_dict_key_map(self) -> dict[str, str | None]:
        """Field name -> state-dict name (``None``: the field's entries go directly under the prefix)."""
        return {}

    def iter_state_dict(self, prefix: str | None = None) -> Iterator[tuple[str, Any]]:
        """``(name, array)`` for each entry, lazily (see :func:`iter_state_dict`)."""
        for name, value in _named_fields(self):
            yield from iter_state_dict(value, with_prefix(prefix, name))

    def to_state_dict(self, prefix: str | None = None) -> StateDict:
        """This module's entries as a dict (see :func:`to_state_dict`)."""
        return _raw_arrays(self.iter_state_dict(prefix))

    def from_state_dict(self: T, state_dict: Mapping[str, Any], prefix: str | None = None) -> T:
        """A copy of this module with each entry read from ``state_dict`` (see :func:`from_state_dict`)."""
        filled = copy.copy(self)
        for field in _dynamic_fields(self):
            key = self._state_dict_key_map().get(field.name, field.name)  # type: ignore[attr-defined]
            value = from_state_dict(getattr(self, field.name), state_dict, with_prefix(prefix, key))
            object.__setattr__(filled, field.name, value)
        return filled

    def flatten_for_export(self: T) -> T:
        """This module with its named axes flattened the way PyTorch lays it out (default: unchanged)."""
        return self

    def unflatten_from_export(self: T, template: T) -> T:
        """Undo :meth:`flatten_for_export`, given a template with the named layout (default: unchanged)."""
        del template
        return self


def _dynamic_fields(module) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(module) if not f.metadata.get("static", False)]


def _named_fields(module: ModuleWithStateDictSerialization) -> Iterator[tuple[str | None, Any]]:
    key_map = module._state_dict_key_map()
    for field in _dynamic_fields(module):
        yield key_map.get(field.name, field.name), getattr(module, field.name)


def _key_name(entry) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def _is_entry(x) -> bool:
    return is_named_array(x) or isinstance(x, ModuleWithStateDictSerialization)


def _entries(tree, prefix: str | None) -> Iterator[tuple[str | None, Any]]:
    """``(name, node)`` for each NamedArray, leaf or self-serializing module reachable in ``tree``."""
    if _is_entry(tree):  # the root itself: tree_flatten would give it the empty path
        yield prefix, tree
        return
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_entry)[0]:
        yield with_prefix(prefix, ".".join(_key_name(p) for p in path) or None), leaf


def iter_state_dict(tree, prefix: str | None = None) -> Iterator[tuple[str, Any]]:
    """``(name, array)`` for every array in ``tree``, in tree order, blocks of repeated layers one by one.

    NamedArrays come out named (a block's slice without the ``Block`` axis), so a caller can put them in
    the axis order it needs; a block's slice is taken only when its entry is reached.

    >>> import haliax_lite as hax
    >>> [(k, v.axes) for k, v in iter_state_dict({"w": hax.ones(hax.Axis("a", 2))}, "m")]
    [('m.w', (Axis(name='a', size=2),))]
    """
    for name, node in _entries(tree, prefix):
        if isinstance(node, ModuleWithStateDictSerialization):
            yield from node.iter_state_dict(name)
        elif name is None:
            raise StateDictError(f"a leaf {type(node).__name__} needs a prefix to be named in a state dict")
        else:
            yield name, node


def _raw_arrays(entries: Iterator[tuple[str, Any]]) -> StateDict:
    return {k: v.array if is_named_array(v) else v for k, v in entries}


def to_state_dict(tree, prefix: str | None = None) -> StateDict:
    """Every array of ``tree`` by dotted name (NamedArrays as their raw arrays), per-layer for ``Stacked``.

    >>> import haliax_lite as hax
    >>> flat = to_state_dict({"norm": {"weight": hax.ones(hax.Axis("embed", 2))}}, "model")
    >>> flat["model.norm.weight"].shape
    (2,)
    """
    return _raw_arrays(iter_state_dict(tree, prefix))


def _is_array_like(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct, np.generic))


def from_state_dict(template: T, state_dict: Mapping[str, Any], prefix: str | None = None) -> T:
    """``template`` with each array replaced by ``state_dict``'s entry of the same name (as ``to_state_dict``
    names them): shapes must match the template's, NamedArrays keep its axes, ``Stacked`` blocks are stacked.

    Entries the template does not name are ignored; a missing one, or one of another shape, is a
    ``StateDictError`` naming the entry (and both shapes). Each entry is read once, so ``state_dict`` may
    read lazily. Templates may be abstract (``jax.ShapeDtypeStruct`` leaves, from ``eqx.filter_eval_shape``).
    An abstract leaf with a ``sharding`` gets its entry placed straight onto that sharding from the host,
    each device receiving only its slice (``jax.make_array_from_callback``, so each process places only what
    its devices hold); any other leaf's entry becomes an array on the default device. Leaves that are not
    arrays (Python numbers) are read if present, else kept.

    >>> import haliax_lite as hax
    >>> w = hax.zeros(hax.Axis("embed", 2))
    >>> from_state_dict({"w": w}, {"w": jnp.ones(3)})
    Traceback (most recent call last):
    ...
    haliax_lite.serialization.StateDictError: w: the state dict has shape (3,), the template needs (2,)

    Onto a mesh: the template's leaf carries the sharding the array is to have.

    >>> from jax.sharding import NamedSharding, PartitionSpec
    >>> Rows, Embed = hax.Axis("rows", 8), hax.Axis("embed", 2)
    >>> rows = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), PartitionSpec("data"))
    >>> abstract = hax.NamedArray(jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=rows), (Rows, Embed))
    >>> placed = from_state_dict({"w": abstract}, {"w": np.ones((8, 2))})["w"]
    >>> placed.array.sharding == rows, len(placed.array.addressable_shards) == jax.device_count()
    (True, True)
    """
    if _is_entry(template):
        leaves, treedef = [(None, template)], None
    else:
        leaves, treedef = jax.tree_util.tree_flatten_with_path(template, is_leaf=_is_entry)
    filled = []
    for path, leaf in leaves:
        name = prefix if path is None else with_prefix(prefix, ".".join(_key_name(p) for p in path) or None)
        if isinstance(leaf, ModuleWithStateDictSerialization):
            filled.append(leaf.from_state_dict(state_dict, name))
        elif name is None:
            raise StateDictError(f"a leaf {type(leaf).__name__} needs a prefix to be read from a state dict")
        elif is_named_array(leaf) or _is_array_like(leaf):
            filled.append(fill_leaf(leaf, read_entry(state_dict, name), name))
        else:
            filled.append(state_dict.get(name, leaf))
    return filled[0] if treedef is None else jax.tree_util.tree_unflatten(treedef, filled)


def read_entry(state_dict: Mapping[str, Any], name: str):
    """``state_dict[name]``, or a :class:`StateDictError` naming the missing entry."""
    try:
        return state_dict[name]
    except KeyError:
        raise StateDictError(f"{name}: missing from the state dict") from None


def fill_leaf(leaf, value, name: str):
    """``value`` in ``leaf``'s place (named with its axes); a :class:`StateDictError` if the shapes differ.

    An abstract ``leaf`` with a sharding gets ``value`` placed on it from the host (each device only its
    slice, read only there when ``value`` is a ``host_placement.HostRegions``); a :class:`HostLeaf` gets it
    on the host, unread; any other leaf, as an array on the default device.
    """
    raw = leaf.array if is_named_array(leaf) else leaf
    sharding = target_sharding(raw)
    on_host = sharding is not None or isinstance(raw, HostLeaf)
    value = host_value(value) if on_host else jnp.asarray(value)
    if tuple(value.shape) != tuple(raw.shape):
        raise StateDictError(
            f"{name}: the state dict has shape {tuple(value.shape)}, the template needs {tuple(raw.shape)}"
        )
    if sharding is not None:
        value = place_from_host(value, sharding)
    return NamedArray(value, leaf.axes) if is_named_array(leaf) else value
