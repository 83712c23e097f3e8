"""Placing host (NumPy) values straight onto a sharding, as abstract template leaves ask.

A template leaf that is a ``jax.ShapeDtypeStruct`` with a ``sharding`` asks for its value to be placed on
that sharding from the host, each device receiving only its slice; a :class:`HostLeaf` asks for the value to
stay a NumPy array on the host (how ``Stacked`` gathers a sharded leaf's blocks before placing the whole).
``serialization.from_state_dict`` and ``nn.scan``'s ``Stacked`` both read templates this way.

>>> import jax, jax.numpy as jnp, numpy as np
>>> from jax.sharding import NamedSharding, PartitionSpec
>>> rows = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), PartitionSpec("data"))
>>> leaf = jax.ShapeDtypeStruct((8, 2), jnp.float32, sharding=rows)
>>> place_from_host(np.ones((8, 2), np.float32), target_sharding(leaf)).sharding == rows
True
>>> target_sharding(HostLeaf((8, 2), jnp.float32)) is None
True
"""

from __future__ import annotations

import jax
import numpy as np


class HostLeaf(jax.ShapeDtypeStruct):
    """An abstract template leaf to be filled with a NumPy array on the host, not placed on a device."""


def target_sharding(raw) -> jax.sharding.Sharding | None:
    """The sharding an abstract template leaf asks its value to be placed on; None for any other leaf."""
    if isinstance(raw, jax.ShapeDtypeStruct) and isinstance(raw.sharding, jax.sharding.Sharding):
        return raw.sharding
    return None


def place_from_host(value: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """``value``, on the host, placed on ``sharding``: each of this process's devices gets only its slice
    (``jax.make_array_from_callback``, so each process places only what its devices hold)."""
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])
