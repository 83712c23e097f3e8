"""``hax.field``: an Equinox field that can name the axes of the plain array it holds.

A module may keep a positional ``jax.Array`` (a buffer, a table from elsewhere) yet still want it laid
out by the axis mapping like its NamedArrays. ``hax.field(axis_names=("vocab", "embed"))`` records the
names in the field's metadata, and :mod:`haliax_lite.partitioning` (``shard``, ``named_jit``, ``pspec_for``,
``infer_resource_partitions``) shards that array as if it were a NamedArray with those axes.

>>> import equinox as eqx, jax.numpy as jnp, haliax_lite as hax
>>> class Table(eqx.Module):
...     rows: jnp.ndarray = hax.field(axis_names=("vocab", "embed"))
>>> with hax.axis_mapping({"vocab": "data"}):
...     hax.partitioning.pspec_for(Table(jnp.zeros((8, 2)))).rows
P('data', None)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax

from .axis import Axis, AxisSelector, axis_name, ensure_tuple
from .core import NamedArray

__all__ = ["field"]


def field(
    *,
    converter: Callable[[Any], Any] | None = None,
    static: bool = False,
    axis_names: Sequence[AxisSelector] | None = None,
    **kwargs: Any,
) -> Any:
    """``equinox.field`` plus ``axis_names``: the logical axis of each dimension of the array it holds.

    ``axis_names`` goes in the field's metadata (as a tuple of names, or None), beside any ``metadata=``
    given. A static field is not an array, so it cannot have axis names.

    >>> import dataclasses, equinox as eqx, jax.numpy as jnp
    >>> class M(eqx.Module):
    ...     w: jnp.ndarray = field(axis_names=("embed",))
    >>> dataclasses.fields(M)[0].metadata["axis_names"]
    ('embed',)
    """
    if static and axis_names is not None:
        raise ValueError("hax.field: a static field holds no array, so it cannot have axis_names")
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata["axis_names"] = (
        None if axis_names is None else tuple(axis_name(a) for a in ensure_tuple(axis_names))
    )
    if converter is not None:
        kwargs["converter"] = converter
    return eqx.field(static=static, metadata=metadata, **kwargs)


class FieldArray(NamedArray):
    """A plain array named by its ``hax.field`` axes, standing in for it while a tree is laid out.

    It is a pytree leaf (not a registered node), so tree maps see it whole; layout functions unwrap it.
    """

    __slots__ = ()


def _is_module(x) -> bool:
    return isinstance(x, eqx.Module)


def _is_plain_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, NamedArray)


def _declared(module: eqx.Module, name: str, names: tuple[str, ...], value) -> FieldArray:
    if len(names) != len(value.shape):
        raise ValueError(
            f"{type(module).__name__}.{name} declares axes {names} but holds an array of shape {value.shape}"
        )
    return FieldArray(value, tuple(Axis(n, int(size)) for n, size in zip(names, value.shape, strict=True)))


def with_field_axes(tree: Any) -> Any:
    """``tree`` with each array held in a ``hax.field(axis_names=...)`` field wrapped as a
    :class:`FieldArray`; modules without such fields come back as they are.

    >>> import equinox as eqx, jax.numpy as jnp
    >>> class M(eqx.Module):
    ...     w: jnp.ndarray = field(axis_names=("embed",))
    >>> with_field_axes([M(jnp.zeros(3))])[0].w.axes
    (Axis(name='embed', size=3),)
    """

    def visit(node):
        if not isinstance(node, eqx.Module):
            return node
        changed = {}
        for f in dataclasses.fields(node):
            if f.metadata.get("static", False) or not hasattr(node, f.name):
                continue
            value, names = getattr(node, f.name), f.metadata.get("axis_names")
            if names is not None and _is_plain_array(value):
                changed[f.name] = _declared(node, f.name, names, value)
            else:
                new = jax.tree_util.tree_map(visit, value, is_leaf=_is_module)
                if any(isinstance(leaf, FieldArray) for leaf in jax.tree_util.tree_leaves(new)):
                    changed[f.name] = new
        return _replaced(node, changed) if changed else node

    return jax.tree_util.tree_map(visit, tree, is_leaf=_is_module)


def _replaced(module: eqx.Module, changes: dict[str, Any]) -> eqx.Module:
    """A copy of ``module`` with some fields replaced, built without running its ``__init__``."""
    copy = object.__new__(type(module))
    for f in dataclasses.fields(module):
        if hasattr(module, f.name):
            object.__setattr__(copy, f.name, changes.get(f.name, getattr(module, f.name)))
    return copy
