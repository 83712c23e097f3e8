"""Repeated layers: ``Stacked`` (one module with a leading ``Block`` axis, run by a scan) and ``BlockSeq``
(a Python list of modules, unrolled). Both have the same API, so a model can switch between them.

``Stacked`` compiles its block once however deep the model is; ``BlockSeq`` compiles every block separately
(slower to compile, sometimes easier to debug or to give heterogeneous blocks). Both take Haliax's
``gradient_checkpointing=``: a ``ScanCheckpointPolicy``, ``True``/``False``, or one of ``"full"``,
``"recompute"``, ``"save_all"``, ``"nested"``, ``"offload"``.

    >>> import jax, haliax_lite as hax
    >>> Layers, Embed = hax.Axis("layers", 3), hax.Axis("embed", 4)
    >>> make = hax.nn.Stacked.init(Layers, hax.nn.MLP, gradient_checkpointing=True)
    >>> stack = make(Embed, Embed, 8, 1, key=jax.random.split(jax.random.PRNGKey(0), 3))
    >>> stack.fold(hax.ones(Embed)).axes
    (Axis(name='embed', size=4),)
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp

from haliax_lite import _namespace as hax
from haliax_lite.checkpoint import ScanCheckpointPolicy as ScanCheckpointPolicy
from haliax_lite.host_placement import HostLeaf, StackedRegions, place_from_host, target_sharding
from haliax_lite.nn.scan_protocols import BlockFoldable, FoldFunction, ModuleInit, ScanFunction, VmapFunction
from haliax_lite.serialization import (
    ModuleWithStateDictSerialization,
    StateDictError,
    from_state_dict,
    iter_state_dict,
    with_prefix,
)

__all__ = [
    "BlockFoldable",
    "BlockSeq",
    "FoldFunction",
    "ModuleInit",
    "ScanCheckpointPolicy",
    "ScanFunction",
    "Stacked",
    "VmapFunction",
]

M = TypeVar("M", bound=eqx.Module)


def _as_policy(gradient_checkpointing, prevent_cse: bool | None):
    policy = hax.ScanCheckpointPolicy.from_bool_or_str(gradient_checkpointing)
    if prevent_cse is not None:
        warnings.warn(
            "prevent_cse= is deprecated (as in Haliax): set ScanCheckpointPolicy(prevent_cse=...) instead",
            DeprecationWarning,
            stacklevel=3,
        )
        policy = dataclasses.replace(policy, prevent_cse=prevent_cse)
    return policy


def _is_named(x) -> bool:
    return isinstance(x, hax.NamedArray)


class _Repeated(ModuleWithStateDictSerialization):
    """What ``Stacked`` and ``BlockSeq`` share: ``fold``/``scan``/``vmap`` call each block's ``__call__``
    through the subclass's ``scan_via``/``vmap_via``; a fold is a scan without outputs."""

    def fold(self, init, *args, **kwargs):
        """``carry = block(carry, *args, **kwargs)`` for each block in order; returns the last carry."""
        return self.fold_via(lambda block, carry, *a, **k: block(carry, *a, **k))(init, *args, **kwargs)

    def scan(self, init, *args, **kwargs):
        """Like ``fold`` for blocks returning ``(carry, output)``; returns ``(carry, outputs)``, the outputs
        stacked along ``Block``."""
        where = type(self).__name__

        def call(block, carry, *a, **k):
            result = block(carry, *a, **k)
            if not (isinstance(result, tuple) and len(result) == 2):
                got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
                raise TypeError(
                    f"{where}.scan: {type(block).__name__}.__call__ returned {got}, but scan needs each "
                    f"block to return (carry, output). For blocks that return only the new carry, use "
                    f"{where}.fold."
                )
            return result

        return self.scan_via(call)(init, *args, **kwargs)

    def vmap(self, *args, **kwargs):
        """Apply every block to the same (or ``Block``-sliced) inputs independently; outputs stacked."""
        return self.vmap_via(lambda block, *a, **k: block(*a, **k))(*args, **kwargs)

    def fold_via(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A fold using ``fn(block, carry, *args, **kwargs) -> carry`` instead of the block's ``__call__``."""
        scan = self.scan_via(lambda block, carry, *a, **k: (fn(block, carry, *a, **k), None))
        return lambda init, *args, **kwargs: scan(init, *args, **kwargs)[0]


class Stacked(_Repeated, Generic[M]):
    """``Block.size`` copies of a module stored as one module whose arrays have a leading ``Block`` axis.

    ``fold`` runs them in sequence (``carry = block(carry, ...)``), ``scan`` also stacks each block's extra
    output along ``Block``, ``vmap`` runs them independently. Named arguments with a ``Block`` axis (and
    unnamed arrays, along their first dimension) are sliced per block; everything else is shared.
    """

    stacked: M
    Block: hax.Axis = eqx.field(static=True)
    gradient_checkpointing: hax.ScanCheckpointPolicy = eqx.field(static=True)

    @classmethod
    def init(
        cls,
        Block: hax.Axis,
        module: type[M],
        *,
        gradient_checkpointing: hax.ScanCheckpointPolicy | bool | str = False,
        prevent_cse: bool | None = None,
    ) -> Callable[..., Stacked[M]]:
        """Curried: returns a function taking ``module.init``'s arguments, batched along ``Block``.

        Pass per-block values (typically ``key=jax.random.split(key, Block.size)``) with a leading
        ``Block`` dimension; other arguments are shared by every block.
        """
        policy = _as_policy(gradient_checkpointing, prevent_cse)

        def make(*args, **kwargs) -> Stacked[M]:
            _check_keys_are_split(Block, module, kwargs)
            return cls(hax.vmap(module.init, Block)(*args, **kwargs), Block, policy)

        return make

    def scan_via(self, fn: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
        """A scan using ``fn(block, carry, *args, **kwargs) -> (carry, output)``."""

        def run(init, *args, **kwargs):
            _check_block_sizes(self, args, kwargs, self.stacked)
            step = lambda carry, block, *a, **k: fn(block, carry, *a, **k)  # noqa: E731
            scan = hax.scan(step, self.Block, remat=self.gradient_checkpointing)
            return scan(init, self.stacked, *args, **kwargs)

        return run

    def vmap_via(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """An independent per-block map using ``fn(block, *args, **kwargs) -> output``."""

        def run(*args, **kwargs):
            _check_block_sizes(self, args, kwargs, self.stacked)
            return hax.vmap(fn, self.Block)(self.stacked, *args, **kwargs)

        return run

    def unstacked(self) -> Sequence[M]:
        """The blocks as a tuple of ordinary modules (for inspection, export or a ``BlockSeq``)."""
        leaves, treedef = jax.tree_util.tree_flatten(self.stacked, is_leaf=_is_named)
        per_leaf = [_unstack_leaf(leaf, self.Block) for leaf in leaves]
        return tuple(jax.tree_util.tree_unflatten(treedef, parts) for parts in zip(*per_leaf, strict=True))

    def get_layer(self, index: int) -> M:
        """Block ``index`` as an ordinary module (its arrays without ``Block``)."""
        return _slice(self.stacked, self.Block, index)

    def map_blocks(self, fn: Callable[..., M], *others: Stacked[M]) -> Stacked[M]:
        """``fn(block, *other_blocks)`` for each block (vmapped over ``Block``), as a new ``Stacked``; used by
        ``scan_aware_tree_map`` (``others`` are Stacked modules of the same structure)."""
        mapped = hax.vmap(fn, self.Block)(self.stacked, *(o.stacked for o in others))
        return dataclasses.replace(self, stacked=mapped)

    # the state-dict protocol: each block gets its own names, ``{prefix}.{i}.{name in the block}``

    def iter_state_dict(self, prefix: str | None = None):
        """Each entry of each block, one slice at a time: for every array, blocks ``0 .. Block.size - 1``."""
        _check_not_nested(self, prefix)
        for sub, leaf in iter_state_dict(self.stacked, None):
            for i in range(self.Block.size):
                key = with_prefix(prefix, f"{i}.{sub}")
                if _is_named(leaf):
                    if self.Block.name not in leaf.shape:
                        raise StateDictError(
                            f"{key}: a Stacked leaf {leaf.axes} lacks the {self.Block.name!r} axis"
                        )
                    yield key, leaf[self.Block.name, i]
                else:
                    yield key, leaf[i]

    def from_state_dict(self, state_dict, prefix: str | None = None) -> Stacked[M]:
        """Read every block's entries (each once) and stack them along ``Block``.

        A leaf whose template is abstract with a sharding is stacked on the host (NumPy) and placed once on
        that sharding, each device receiving only its slice: no block, and no whole leaf, on one device.
        Other leaves are stacked from per-block arrays on the default device.
        """
        _check_not_nested(self, prefix)
        template = jax.tree_util.tree_map(
            lambda leaf: _block_template(leaf, self.Block, prefix), self.stacked, is_leaf=_is_named
        )
        blocks = [
            from_state_dict(template, state_dict, with_prefix(prefix, str(i))) for i in range(self.Block.size)
        ]
        stacked = jax.tree_util.tree_map(
            lambda leaf, *parts: _stack_like(leaf, parts), self.stacked, *blocks, is_leaf=_is_named
        )
        return dataclasses.replace(self, stacked=stacked)


def _check_not_nested(stacked: Stacked, prefix: str | None) -> None:
    inner = [x for x in jax.tree_util.tree_leaves(stacked.stacked, is_leaf=lambda x: isinstance(x, Stacked))]
    if any(isinstance(x, Stacked) for x in inner):
        raise StateDictError(f"{prefix}: nested Stacked layers have no per-layer names")


def _block_template(leaf, Block: hax.Axis, prefix: str | None):
    """One block's abstract leaf: ``leaf`` without ``Block`` (an unnamed one: without its first dimension),
    read onto the host when ``leaf`` is to be placed on a sharding."""
    if _is_named(leaf):
        if Block.name not in leaf.shape:
            raise StateDictError(f"{prefix}: a Stacked leaf {leaf.axes} lacks the {Block.name!r} axis")
        axes = tuple(a for a in leaf.axes if a.name != Block.name)
        return hax.NamedArray(_abstract_part(leaf.array, tuple(a.size for a in axes)), axes)
    if hasattr(leaf, "shape") and len(leaf.shape) >= 1:
        return _abstract_part(leaf, tuple(leaf.shape[1:]))
    return leaf


def _abstract_part(raw, shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """A block's abstract ``shape`` of ``raw``, to be read onto the host when ``raw`` carries a sharding."""
    kind = jax.ShapeDtypeStruct if target_sharding(raw) is None else HostLeaf
    return kind(shape, raw.dtype)


def _stack_like(leaf, parts):
    """Per-block values stacked back into ``leaf``'s layout."""
    if _is_named(leaf):
        index = [a.name for a in leaf.axes].index(_block_name(leaf, parts[0]))
        return hax.NamedArray(_stack_parts(leaf.array, [p.array for p in parts], index), leaf.axes)
    if hasattr(leaf, "shape") and len(leaf.shape) >= 1:
        return _stack_parts(leaf, parts, 0)
    return parts[0]


def _stack_parts(raw, parts: list, axis: int):
    """``parts`` stacked along ``axis``; when ``raw`` carries a sharding, on the host and placed once, each
    device's slice read from the parts it spans."""
    sharding = target_sharding(raw)
    if sharding is None:
        return jnp.stack(parts, axis=axis)
    return place_from_host(StackedRegions(parts, axis), sharding)


def _block_name(leaf, part) -> str:
    (name,) = {a.name for a in leaf.axes} - {a.name for a in part.axes}
    return name


def _is_single_key(x) -> bool:
    """A PRNG key that was not split: a typed key with no dimensions, or a raw ``uint32[2]`` key."""
    if not hasattr(x, "dtype") or not hasattr(x, "shape"):
        return False
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return x.ndim == 0
    return x.dtype == jnp.uint32 and tuple(x.shape) == (2,)


def _check_keys_are_split(Block: hax.Axis, module: type, kwargs: dict) -> None:
    for name, value in kwargs.items():
        if _is_single_key(value):
            raise ValueError(
                f"Stacked.init({Block}, {module.__name__}) got one PRNG key as {name}=, but each of the "
                f"{Block.size} blocks needs its own: pass {name}=jax.random.split({name}, {Block.size})"
            )


def _unstack_leaf(leaf, Block: hax.Axis) -> tuple:
    if _is_named(leaf):
        if Block.name in leaf.shape:
            return tuple(hax.unbind(leaf, Block))
    elif isinstance(leaf, jax.Array) and leaf.ndim >= 1:
        if leaf.shape[0] != Block.size:
            raise ValueError(f"an unnamed leaf of shape {leaf.shape} does not lead with {Block}")
        return tuple(leaf[i] for i in range(Block.size))
    return (leaf,) * Block.size


class BlockSeq(_Repeated, Generic[M]):
    """``Stacked``'s API over a plain sequence of modules, run by an unrolled Python loop.

    Each block call is checkpointed with the same policy a ``Stacked`` scan step would use (a nested
    policy has no outer scan to split here, so only its inner policy applies).
    """

    blocks: Sequence[M]
    Block: hax.Axis = eqx.field(static=True)
    gradient_checkpointing: hax.ScanCheckpointPolicy = eqx.field(static=True)

    @classmethod
    def init(
        cls,
        Block: hax.Axis,
        module: type[M],
        *,
        gradient_checkpointing: hax.ScanCheckpointPolicy | bool | str = False,
        prevent_cse: bool | None = None,
    ) -> Callable[..., BlockSeq[M]]:
        """Curried like ``Stacked.init``: block ``i`` is built from slice ``i`` of each batched argument."""
        policy = _as_policy(gradient_checkpointing, prevent_cse)

        def make(*args, **kwargs) -> BlockSeq[M]:
            blocks = [
                module.init(*_slice(args, Block, i), **_slice(kwargs, Block, i)) for i in range(Block.size)
            ]
            return cls(blocks, Block, policy)

        return make

    def scan_via(self, fn: Callable[..., tuple[Any, Any]]) -> Callable[..., tuple[Any, Any]]:
        """A scan using ``fn(block, carry, *args, **kwargs) -> (carry, output)``."""
        carry_name = f"BlockSeq[{self.Block.name}].carry"
        input_name = f"BlockSeq[{self.Block.name}].input"

        def run(init, *args, **kwargs):
            _check_block_sizes(self, args, kwargs)
            carry, outputs = init, []
            for i, block in enumerate(self.blocks):
                inputs = (block, _slice(args, self.Block, i), _slice(kwargs, self.Block, i))
                # Only arrays go through jax.checkpoint; Python values (flags, callables) are closed over.
                arrays, static = eqx.partition(inputs, eqx.is_array)

                def step(carry, arrays, static=static):
                    block, block_args, block_kwargs = eqx.combine(arrays, static)
                    return fn(block, carry, *block_args, **block_kwargs)

                checkpointed = self.gradient_checkpointing.checkpoint(carry_name, input_name, step)
                carry, out = checkpointed(carry, arrays)
                outputs.append(out)
            return carry, _stack(self.Block, outputs)

        return run

    def vmap_via(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """An independent per-block map using ``fn(block, *args, **kwargs) -> output``."""

        def run(*args, **kwargs):
            _check_block_sizes(self, args, kwargs)
            outputs = [
                fn(block, *_slice(args, self.Block, i), **_slice(kwargs, self.Block, i))
                for i, block in enumerate(self.blocks)
            ]
            return _stack(self.Block, outputs)

        return run

    def unstacked(self) -> Sequence[M]:
        """The blocks, as a tuple."""
        return tuple(self.blocks)

    def get_layer(self, index: int) -> M:
        """Block ``index``."""
        return self.blocks[index]

    def _state_dict_key_map(self) -> dict[str, str | None]:
        return {"blocks": None}  # block i is named {prefix}.{i}, as a Stacked block is


def _check_block_sizes(repeated: _Repeated, args, kwargs, stacked=None) -> None:
    """Every array sliced per block (named ones with ``Block``; unnamed ones along their first dimension)
    must have ``Block.size`` entries; an error names the argument (``args[1]``, ``kwargs['bias']``) or the
    module field (``foo.my_field``) that does not, instead of a position inside the scan."""
    Block = repeated.Block
    where = f"{type(repeated).__name__}[{Block.name}={Block.size}]"
    trees = [("the stacked block's field ", stacked)] if stacked is not None else []
    trees += [("argument args", args), ("argument kwargs", kwargs)]
    for label, tree in trees:
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_named)[0]:
            if _is_named(leaf):
                size = leaf.shape.get(Block.name)
                shape = f"axes {tuple(leaf.axes)}"
            elif isinstance(leaf, jax.Array) and leaf.ndim >= 1 and label != "the stacked block's field ":
                size, shape = leaf.shape[0], f"shape {leaf.shape}, first dimension"
            else:
                continue
            if size is not None and size != Block.size:
                name = jax.tree_util.keystr(path)
                name = name.lstrip(".") if label.endswith(" ") else name
                raise ValueError(
                    f"{where}: {label}{name} ({shape}) has {size} entries along {Block.name!r}, but there "
                    f"are "
                    f"{Block.size} blocks; a per-block argument needs one entry per block"
                )


def _slice(tree, Block: hax.Axis, i: int):
    """Block ``i`` of every leaf that has a ``Block`` axis (unnamed arrays: their first dimension)."""

    def take(leaf):
        if _is_named(leaf):
            return hax.take(leaf, Block.name, i) if Block.name in leaf.shape else leaf
        if isinstance(leaf, jax.Array) and leaf.ndim >= 1:
            return leaf[i]
        return leaf

    return jax.tree_util.tree_map(take, tree, is_leaf=_is_named)


def _stack(Block: hax.Axis, trees: list):
    """Stack per-block outputs along ``Block`` (named) or a new first dimension (unnamed)."""

    def stack(*leaves):
        if _is_named(leaves[0]):
            return hax.stack(Block, leaves)
        return jnp.stack(leaves)

    return jax.tree_util.tree_map(stack, *trees, is_leaf=_is_named)
