"""JAX helpers Haliax code imports from ``haliax.jax_utils``: key splitting, checkpointing, nested scans.

>>> import jax
>>> shaped_rng_split(jax.random.PRNGKey(0), (2, 3)).shape
(2, 3, 2)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .checkpoint import tree_checkpoint_name

__all__ = [
    "filter_checkpoint",
    "is_jax_array_like",
    "maybe_rng_split",
    "multilevel_scan",
    "shaped_rng_split",
    "tree_checkpoint_name",
]


def is_jax_array_like(x: Any) -> bool:
    """Whether ``x`` has a shape and a dtype (a JAX or NumPy array, a tracer, a ``ShapeDtypeStruct``)."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


def maybe_rng_split(key: jax.Array | None, num: int = 2):
    """``num`` keys split from ``key`` (a leading dimension of 1 when ``num`` is 1); ``num`` Nones for None.

    >>> maybe_rng_split(None, 3)
    [None, None, None]
    """
    if key is None:
        return [None] * num
    if num == 1:
        return jnp.reshape(key, (1, *key.shape))
    return jax.random.split(key, num)


def shaped_rng_split(key: jax.Array, split_shape: int | Sequence[int] = 2) -> jax.Array:
    """Keys split from ``key`` and laid out with leading shape ``split_shape`` (as Haliax's).

    >>> shaped_rng_split(jax.random.PRNGKey(0), 4).shape
    (4, 2)
    """
    shape = (split_shape,) if isinstance(split_shape, int) else tuple(split_shape)
    count = int(np.prod(shape, dtype=np.int64))
    if count < 1:
        raise ValueError(f"shaped_rng_split: split_shape {split_shape} holds no keys")
    return jnp.reshape(maybe_rng_split(key, count), (*shape, *key.shape))


def filter_checkpoint(fun: Callable, *, prevent_cse: bool = True, policy: Callable[..., bool] | None = None):
    """``jax.checkpoint`` for functions taking and returning any Python objects (``eqx.filter_checkpoint``).

    >>> f = filter_checkpoint(lambda x, scale: x * scale)
    >>> float(jax.grad(lambda x: f(x, 3.0))(1.0))
    3.0
    """
    return eqx.filter_checkpoint(fun, prevent_cse=prevent_cse, policy=policy)


def multilevel_scan(
    f: Callable,
    carry,
    xs,
    outer_size: int,
    length: int,
    reverse: bool = False,
    unroll: int = 1,
    prevent_cse: bool = True,
):
    """``jax.lax.scan(f, carry, xs)`` run as ``outer_size`` checkpointed groups of ``length // outer_size``
    steps, so that backward keeps only the carries at group boundaries (the sqrt(N) memory trick).

    >>> carry, ys = multilevel_scan(lambda c, x: (c + x, c), 0.0, jnp.arange(6.0), outer_size=2, length=6)
    >>> float(carry), ys.tolist()
    (15.0, [0.0, 0.0, 1.0, 3.0, 6.0, 10.0])
    """
    inner = length // outer_size if outer_size else 0
    if outer_size < 1 or inner * outer_size != length:
        raise ValueError(
            f"multilevel_scan: length {length} is not divisible into outer_size={outer_size} groups"
        )

    def split(x):
        return x.reshape(outer_size, inner, *x.shape[1:]) if is_jax_array_like(x) and x.shape else x

    def join(y):
        return y.reshape(length, *y.shape[2:]) if is_jax_array_like(y) and y.shape else y

    group = functools.partial(jax.lax.scan, f, length=inner, reverse=reverse, unroll=unroll)
    group = jax.checkpoint(group, prevent_cse=prevent_cse)
    carry, ys = jax.lax.scan(
        group, carry, jax.tree_util.tree_map(split, xs), length=outer_size, reverse=reverse
    )
    return carry, jax.tree_util.tree_map(join, ys)
