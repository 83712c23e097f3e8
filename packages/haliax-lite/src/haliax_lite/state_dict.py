"""Flat state dicts: a module's arrays by dotted name, repeated layers under per-layer names (as Haliax).

A ``Stacked`` module stores its blocks as one module whose arrays lead with the ``Block`` axis; in a state
dict each block gets its own names, ``{path}.{i}.{name in the block}``, the layout PyTorch and Hugging Face
checkpoints use. ``iter_state_dict`` yields the entries lazily, one array at a time, so an exporter never
holds two copies of a large model; ``from_state_dict`` fills a template from any mapping (a lazy reader of
a file, say), reading each entry once.

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

from collections.abc import Iterator, Mapping

import jax
import jax.numpy as jnp

from .core import NamedArray, is_named_array

__all__ = ["StateDictError", "from_state_dict", "iter_state_dict", "to_state_dict"]


class StateDictError(ValueError):
    """A state dict that does not fit its template: a missing entry, or one of another shape."""


def _repeated_types() -> tuple[type, ...]:
    from .nn.scan import BlockSeq, Stacked  # the layers import this package: resolve them at call time

    return Stacked, BlockSeq


def _key_name(entry) -> str:
    for attribute in ("name", "key", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def _join(prefix: str | None, *parts: str) -> str:
    return ".".join(p for p in (prefix, *parts) if p)


def _children(tree, prefix: str | None):
    """``(name, node)`` for each NamedArray, array or repeated-layers module reachable in ``tree``."""
    repeated = _repeated_types()
    is_leaf = lambda x: is_named_array(x) or isinstance(x, repeated)  # noqa: E731
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]:
        yield _join(prefix, *(_key_name(p) for p in path)), leaf


def iter_state_dict(tree, prefix: str | None = None) -> Iterator[tuple[str, NamedArray | jax.Array]]:
    """``(name, array)`` for every array in ``tree``, in tree order, blocks of repeated layers one by one.

    NamedArrays come out named (a block's slice without the ``Block`` axis), so a caller can put them in
    the axis order it needs; a block's slice is taken only when its entry is reached.

    >>> import haliax_lite as hax
    >>> [(k, v.axes) for k, v in iter_state_dict({"w": hax.ones(hax.Axis("a", 2))}, "m")]
    [('m.w', (Axis(name='a', size=2),))]
    """
    Stacked, BlockSeq = _repeated_types()
    for name, node in _children(tree, prefix):
        if isinstance(node, Stacked):
            for sub, leaf in _children(node.stacked, None):
                yield from _per_block(name, sub, leaf, node.Block)
        elif isinstance(node, BlockSeq):
            for i, block in enumerate(node.blocks):
                yield from iter_state_dict(block, _join(name, str(i)))
        else:
            yield name, node


def _per_block(name: str, sub: str, leaf, Block) -> Iterator[tuple[str, NamedArray | jax.Array]]:
    Stacked, _ = _repeated_types()
    if isinstance(leaf, Stacked):
        raise StateDictError(f"{_join(name, sub)}: nested Stacked layers have no per-layer names")
    for i in range(Block.size):
        key = _join(name, str(i), sub)
        if is_named_array(leaf):
            if Block.name not in leaf.shape:
                raise StateDictError(f"{key}: a Stacked leaf {leaf.axes} lacks the {Block.name!r} axis")
            yield key, leaf[Block.name, i]
        else:
            yield key, leaf[i]


def to_state_dict(tree, prefix: str | None = None) -> dict[str, jax.Array]:
    """Every array of ``tree`` by dotted name (NamedArrays as their raw arrays), per-layer for ``Stacked``.

    >>> import haliax_lite as hax
    >>> flat = to_state_dict({"norm": {"weight": hax.ones(hax.Axis("embed", 2))}}, "model")
    >>> flat["model.norm.weight"].shape
    (2,)
    """
    return {k: v.array if is_named_array(v) else v for k, v in iter_state_dict(tree, prefix)}


def from_state_dict(template, state_dict: Mapping[str, object], prefix: str | None = None):
    """``template`` with each array replaced by ``state_dict``'s entry of the same name (as ``to_state_dict``
    names them): shapes must match the template's, NamedArrays keep its axes, ``Stacked`` blocks are stacked.

    Entries the template does not name are ignored; a missing one, or one of another shape, is a
    ``StateDictError`` naming the entry (and both shapes). Each entry is read once, so ``state_dict`` may
    read lazily. Templates may be abstract (``jax.ShapeDtypeStruct`` leaves, from ``eqx.filter_eval_shape``).

    >>> import haliax_lite as hax
    >>> w = hax.zeros(hax.Axis("embed", 2))
    >>> from_state_dict({"w": w}, {"w": jnp.ones(3)})
    Traceback (most recent call last):
    ...
    haliax_lite.state_dict.StateDictError: w: the state dict has shape (3,), the template needs (2,)
    """
    Stacked, BlockSeq = _repeated_types()
    repeated = (Stacked, BlockSeq)
    is_leaf = lambda x: is_named_array(x) or isinstance(x, repeated)  # noqa: E731
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template, is_leaf=is_leaf)
    filled = []
    for path, leaf in leaves:
        name = _join(prefix, *(_key_name(p) for p in path))
        if isinstance(leaf, Stacked):
            filled.append(_fill_stacked(leaf, state_dict, name))
        elif isinstance(leaf, BlockSeq):
            blocks = [from_state_dict(b, state_dict, _join(name, str(i))) for i, b in enumerate(leaf.blocks)]
            filled.append(BlockSeq(blocks, leaf.Block, leaf.gradient_checkpointing))
        else:
            filled.append(_fill_leaf(leaf, _read(state_dict, name), name))
    return jax.tree_util.tree_unflatten(treedef, filled)


def _read(state_dict: Mapping[str, object], name: str):
    try:
        return state_dict[name]
    except KeyError:
        raise StateDictError(f"{name}: missing from the state dict") from None


def _fill_leaf(leaf, value, name: str):
    raw = leaf.array if is_named_array(leaf) else leaf
    value = jnp.asarray(value)
    if tuple(value.shape) != tuple(raw.shape):
        raise StateDictError(
            f"{name}: the state dict has shape {tuple(value.shape)}, the template needs {tuple(raw.shape)}"
        )
    return NamedArray(value, leaf.axes) if is_named_array(leaf) else value


def _fill_stacked(stacked, state_dict: Mapping[str, object], name: str):
    Block = stacked.Block
    is_leaf = is_named_array
    leaves, treedef = jax.tree_util.tree_flatten_with_path(stacked.stacked, is_leaf=is_leaf)
    filled = []
    for path, leaf in leaves:
        sub = _join(None, *(_key_name(p) for p in path))
        if is_named_array(leaf):
            if Block.name not in leaf.shape:
                raise StateDictError(f"{_join(name, sub)}: a Stacked leaf {leaf.axes} lacks {Block.name!r}")
            index = leaf.axes.index(leaf.resolve_axis(Block.name))
            block_axes = leaf.axes[:index] + leaf.axes[index + 1 :]
            block = jax.ShapeDtypeStruct(tuple(a.size for a in block_axes), leaf.dtype)
            parts = [
                _fill_leaf(
                    NamedArray(block, block_axes),
                    _read(state_dict, _join(name, str(i), sub)),
                    _join(name, str(i), sub),
                ).array
                for i in range(Block.size)
            ]
            filled.append(NamedArray(jnp.stack(parts, axis=index), leaf.axes))
        else:
            block = jax.ShapeDtypeStruct(tuple(leaf.shape[1:]), leaf.dtype)
            parts = [
                _fill_leaf(block, _read(state_dict, _join(name, str(i), sub)), _join(name, str(i), sub))
                for i in range(Block.size)
            ]
            filled.append(jnp.stack(parts))
    return type(stacked)(jax.tree_util.tree_unflatten(treedef, filled), Block, stacked.gradient_checkpointing)
