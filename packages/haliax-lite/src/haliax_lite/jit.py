"""``named_jit``: ``jax.jit`` that shards inputs, intermediates and outputs by axis name.

Arrays (named or not) are traced; every other argument is static, as in ``equinox.filter_jit``. Inside
the function the ``axis_resources`` mapping is current, so ``hax.shard`` calls in model code use it.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax

from .partitioning import ResourceMapping, _normalize, axis_mapping, current_thread_local_mapping, shard

__all__ = ["fsdp", "named_jit"]


class _Static:
    """A hashable wrapper for the static (non-array) part of the arguments."""

    def __init__(self, value):
        self.leaves, self.treedef = jax.tree_util.tree_flatten(value)

    def _key(self):
        return self.treedef, tuple(self.leaves)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, _Static) and self._key() == other._key()

    @property
    def value(self):
        return jax.tree_util.tree_unflatten(self.treedef, self.leaves)


def _frozen(mapping):
    return None if mapping is None else tuple(sorted(_normalize(mapping).items()))


def named_jit(
    fn=None,
    axis_resources: ResourceMapping | None = None,
    *,
    in_axis_resources: ResourceMapping | None = None,
    out_axis_resources: ResourceMapping | None = None,
    donate_args=None,
    donate_kwargs=None,
    **jit_kwargs,
):
    """JIT-compile ``fn`` under an axis mapping.

    ``axis_resources`` (default: the mapping current at call time) is the mapping inside ``fn``;
    ``in_axis_resources``/``out_axis_resources`` (default: ``axis_resources``) lay out the NamedArrays
    going in and out. ``donate_args``/``donate_kwargs`` are pytree prefixes of bools saying which
    argument buffers may be reused. Usable as a decorator with or without arguments.

    >>> import haliax_lite as hax
    >>> f = hax.named_jit(lambda x: x * 2)
    >>> f(hax.ones(hax.Axis("a", 2))).array.tolist()
    [2.0, 2.0]
    """
    if fn is None:
        return functools.partial(
            named_jit,
            axis_resources=axis_resources,
            in_axis_resources=in_axis_resources,
            out_axis_resources=out_axis_resources,
            donate_args=donate_args,
            donate_kwargs=donate_kwargs,
            **jit_kwargs,
        )

    def inner(donated, kept, static, mappings):
        compute, in_map, out_map = (None if m is None else dict(m) for m in mappings)
        args, kwargs = eqx.combine(donated, kept, static.value)
        with axis_mapping(compute or {}):
            if in_map is not None:
                args, kwargs = shard((args, kwargs), in_map)
            out = fn(*args, **kwargs)
            return shard(out, out_map) if out_map is not None else out

    jitted = jax.jit(inner, static_argnums=(2, 3), donate_argnums=(0,), **jit_kwargs)

    def prepare(args, kwargs):
        compute = axis_resources if axis_resources is not None else current_thread_local_mapping()
        in_map = in_axis_resources if in_axis_resources is not None else compute
        out_map = out_axis_resources if out_axis_resources is not None else compute
        dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
        n_donate = len(donate_args or ())
        donate_spec = (
            tuple(donate_args or ()) + (False,) * (len(args) - n_donate),
            {k: (donate_kwargs or {}).get(k, False) for k in kwargs},
        )
        donate_mask = jax.tree_util.tree_map(
            lambda flag, sub: jax.tree_util.tree_map(lambda _: bool(flag), sub), donate_spec, dynamic
        )
        donated, kept = eqx.partition(dynamic, donate_mask)
        return donated, kept, _Static(static), (_frozen(compute), _frozen(in_map), _frozen(out_map))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return jitted(*prepare(args, kwargs))

    wrapper.lower = lambda *args, **kwargs: jitted.lower(*prepare(args, kwargs))
    return wrapper


def fsdp(fn, parameter_mapping: ResourceMapping, compute_mapping: ResourceMapping):
    """Fully-sharded data parallelism: arguments and results laid out by ``parameter_mapping``, the
    computation by ``compute_mapping`` (``named_jit`` with those mappings)."""
    return named_jit(
        fn,
        axis_resources=compute_mapping,
        in_axis_resources=parameter_mapping,
        out_axis_resources=parameter_mapping,
    )
