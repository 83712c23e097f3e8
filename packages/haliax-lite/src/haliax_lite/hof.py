"""Higher-order functions over named axes: ``vmap``, and ``scan``/``fold``/``map`` along an axis.

NamedArrays that have the axis are mapped over it; inside the function they lack it, and named outputs
get it back as their first axis. Plain arrays are mapped over their first dimension.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from .axis import Axis, AxisSelection, AxisSelector, axis_name, ensure_tuple
from .broadcast import _shape_str
from .checkpoint import ScanCheckpointPolicy, ScanCheckpointSpec
from .core import NamedArray, is_named_array
from .jax_utils import multilevel_scan

__all__ = ["fold", "is_named_or_shaped_array_like", "map", "scan", "vmap"]


def is_named_or_shaped_array_like(x) -> bool:
    """NamedArrays and arrays with at least one dimension (the things scans map over by default)."""
    return isinstance(x, NamedArray) or (hasattr(x, "shape") and hasattr(x, "dtype") and len(x.shape) > 0)


def _zero_if_array_else_none(x):
    return 0 if is_named_or_shaped_array_like(x) else None


class _Split:
    """The leaves of ``(args, kwargs)`` split into mapped raw arrays (axis first) and the rest."""

    def __init__(
        self,
        args,
        kwargs,
        axis: AxisSelector,
        unnamed_dim: Callable[[int, object], int | None],
        what: str = "hax.vmap",
    ):
        with_paths, self.treedef = jax.tree_util.tree_flatten_with_path(
            (args, kwargs), is_leaf=is_named_array
        )
        positional = "xs" if what == "hax.scan" else "args"
        self.paths = [_describe_path(path, positional) for path, _ in with_paths]
        self.leaves = [leaf for _, leaf in with_paths]
        self.name = axis_name(axis)
        self.what = what
        self.size = axis.size if isinstance(axis, Axis) else None
        self.size_from = f"the axis {axis}" if isinstance(axis, Axis) else None
        self.mapped: list[tuple[int, tuple[Axis, ...] | None]] = []
        self.raw: list = []
        for i, leaf in enumerate(self.leaves):
            if isinstance(leaf, NamedArray):
                index = leaf._lookup_indices(self.name)
                if index is None:
                    continue
                self._record_size(leaf.axes[index].size, i, f"axes {_shape_str(leaf.axes)}")
                self.mapped.append((i, leaf.axes[:index] + leaf.axes[index + 1 :]))
                self.raw.append(jnp.moveaxis(leaf.array, index, 0))
            else:
                dim = unnamed_dim(i, leaf)
                if dim is None:
                    continue
                self._record_size(leaf.shape[dim], i, f"shape {leaf.shape}, dimension {dim}")
                self.mapped.append((i, None))
                self.raw.append(jnp.moveaxis(leaf, dim, 0))
        if self.size is None:
            raise ValueError(
                f"Cannot infer the size of axis {self.name!r} for {self.what}: no argument has it; "
                f"pass an Axis (e.g. hax.Axis({self.name!r}, n)) instead of its name"
            )

    def _record_size(self, size: int, i: int, shape) -> None:
        where = f"argument {self.paths[i]} ({shape})"
        if self.size is None:
            self.size, self.size_from = size, where
        elif size != self.size:
            raise ValueError(
                f"{self.what} over axis {self.name!r}: {where} has size {size} along it, but "
                f"{self.size_from} has size {self.size}; every mapped argument needs the same size"
            )

    def rebuild(self, raw_slices):
        leaves = list(self.leaves)
        for (i, axes), raw in zip(self.mapped, raw_slices, strict=True):
            leaves[i] = raw if axes is None else NamedArray(raw, axes)
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def _describe_path(path, positional: str) -> str:
    """``args[0].weight`` / ``kwargs['x']`` for a key path into ``(args, kwargs)``."""
    if not path:
        return "(the arguments)"
    head, rest = path[0], path[1:]
    base = positional if getattr(head, "idx", None) == 0 else "kwargs"
    return base + jax.tree_util.keystr(tuple(rest))


_MAPPED = object()


class _Outputs:
    """Strip an output tree to its raw arrays, then rebuild it with the mapped axis in front.

    Leaves that are not arrays (ints, functions, ... in an Equinox module) are the same in every
    iteration, so they are kept from the trace instead of being mapped.
    """

    def strip(self, tree):
        leaves, self.treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_named_array)
        self.axes = [leaf.axes if isinstance(leaf, NamedArray) else None for leaf in leaves]
        raw = [leaf.array if isinstance(leaf, NamedArray) else leaf for leaf in leaves]
        self.static = [_MAPPED if eqx.is_array(r) else r for r in raw]
        return [r for r in raw if eqx.is_array(r)]

    def restore(self, raw_arrays, new_axis: Axis):
        arrays = iter(raw_arrays)
        leaves = [
            _named(next(arrays), axes, new_axis) if static is _MAPPED else static
            for static, axes in zip(self.static, self.axes, strict=True)
        ]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def _named(raw, axes, new_axis: Axis):
    return raw if axes is None else NamedArray(raw, (new_axis, *axes))


def _unnamed_spec(default, args_spec, kwargs_spec, args, kwargs):
    """Per-leaf mapped dimension of unnamed leaves: per-argument specs override ``default``."""
    spec_tree = (
        tuple(args_spec) + (default,) * (len(args) - len(args_spec)),
        {k: kwargs_spec.get(k, default) for k in kwargs},
    )
    dims = []

    def expand(spec, subtree):
        leaves = jax.tree_util.tree_leaves(subtree, is_leaf=is_named_array)
        dims.extend((spec(leaf) if callable(spec) else spec) for leaf in leaves)

    jax.tree_util.tree_map(expand, spec_tree, (tuple(args), dict(kwargs)), is_leaf=lambda x: x is None)
    return lambda i, leaf: dims[i] if is_named_or_shaped_array_like(leaf) else None


def vmap(
    fn: Callable, axis: AxisSelection, *, default=_zero_if_array_else_none, args=(), kwargs=None
) -> Callable:
    """Vectorize ``fn`` over a named axis (or several, outermost first).

    >>> import haliax_lite as hax
    >>> B, E = hax.Axis("b", 2), hax.Axis("e", 3)
    >>> hax.vmap(lambda x: hax.sum(x), B)(hax.ones((E, B))).axes == (B,)
    True
    """
    axes = ensure_tuple(axis)
    if len(axes) != 1:
        for ax in reversed(axes):
            fn = vmap(fn, ax, default=default, args=args, kwargs=kwargs)
        return fn
    (axis,) = axes
    kwargs_spec = kwargs or {}

    @functools.wraps(fn)
    def vmapped(*call_args, **call_kwargs):
        unnamed = _unnamed_spec(default, args, kwargs_spec, call_args, call_kwargs)
        split = _Split(call_args, call_kwargs, axis, unnamed)
        outputs = _Outputs()

        def one(raw_slices):
            a, kw = split.rebuild(raw_slices)
            return outputs.strip(fn(*a, **kw))

        raw_out = jax.vmap(one, in_axes=0, out_axes=0, axis_size=split.size)(split.raw)
        return outputs.restore(raw_out, Axis(split.name, split.size))

    return vmapped


def _nested_outer_size(n: int, nested: bool | int) -> int:
    if nested is not True:
        if n % nested:
            raise ValueError(f"nested={nested} outer blocks does not divide the scanned axis size {n}")
        return nested
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0) if n else 1


def scan(
    f: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_scanned=is_named_or_shaped_array_like,
) -> Callable:
    """Curried named scan: ``scan(f, axis)(init, *xs)`` returns ``(carry, ys)``.

    ``f(carry, *x) -> (carry, y)`` sees each argument without ``axis``; ``ys`` has ``axis`` in front.

    >>> import haliax_lite as hax
    >>> T = hax.Axis("t", 3)
    >>> total, running = hax.scan(lambda c, x: (c + x, c + x), T)(hax.zeros(()), hax.arange(T))
    >>> running.array.tolist()
    [0.0, 1.0, 3.0]
    """
    policy = ScanCheckpointPolicy.from_bool_or_str(remat)

    def scanned(init, *args, **kwargs):
        split = _Split(args, kwargs, axis, lambda i, leaf: 0 if is_scanned(leaf) else None, "hax.scan")
        outputs = _Outputs()

        def body(carry, raw_slices):
            a, kw = split.rebuild(raw_slices)
            carry, y = f(carry, *a, **kw)
            return carry, outputs.strip(y)

        step = policy.checkpoint("scan_carry", "scan_input", body)
        if policy.nested and not policy.disable:
            carry, raw_ys = _nested_scan(step, init, split.raw, split.size, policy, reverse, unroll)
        else:
            carry, raw_ys = jax.lax.scan(
                step, init, split.raw, length=split.size, reverse=reverse, unroll=unroll
            )
        return carry, outputs.restore(raw_ys, Axis(split.name, split.size))

    return scanned


def _nested_scan(step, init, xs, n: int, policy: ScanCheckpointPolicy, reverse: bool, unroll: int):
    """Scan ``outer`` checkpointed groups of ``n // outer`` steps; only group-boundary carries are kept."""
    outer = _nested_outer_size(n, policy.nested)
    return multilevel_scan(step, init, xs, outer, n, reverse, unroll, prevent_cse=policy.prevent_cse)


def fold(
    fn: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_scanned=is_named_or_shaped_array_like,
) -> Callable:
    """Curried named fold: ``fold(fn, axis)(init, *xs)`` returns the final carry of ``fn(carry, *x)``.

    >>> import haliax_lite as hax
    >>> T = hax.Axis("t", 4)
    >>> hax.fold(lambda c, x: c + x, T)(hax.zeros(()), hax.arange(T)).item()
    6.0
    """

    def step(carry, *args, **kwargs):
        return fn(carry, *args, **kwargs), None

    scanned = scan(step, axis, remat=remat, reverse=reverse, unroll=unroll, is_scanned=is_scanned)
    return lambda init, *args, **kwargs: scanned(init, *args, **kwargs)[0]


def map(
    fn: Callable,
    axis: AxisSelector,
    *,
    remat: ScanCheckpointSpec = False,
    reverse: bool = False,
    unroll: int = 1,
    is_mapped=is_named_or_shaped_array_like,
) -> Callable:
    """Apply ``fn`` to each slice along ``axis`` sequentially (less memory than ``vmap``)."""

    def step(carry, *args, **kwargs):
        return carry, fn(*args, **kwargs)

    scanned = scan(step, axis, remat=remat, reverse=reverse, unroll=unroll, is_scanned=is_mapped)
    return lambda *args, **kwargs: scanned(None, *args, **kwargs)[1]
