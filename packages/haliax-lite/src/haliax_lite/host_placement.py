"""Placing host values straight onto a sharding, as abstract template leaves ask, reading only what each
device holds.

A template leaf that is a ``jax.ShapeDtypeStruct`` with a ``sharding`` asks for its value to be placed on
that sharding from the host, each device receiving only its slice; a :class:`HostLeaf` asks for the value to
stay on the host (how ``Stacked`` gathers a sharded leaf's blocks before placing the whole).
``serialization.from_state_dict`` and ``nn.scan``'s ``Stacked`` both read templates this way.

A host value is a NumPy array or any :class:`HostRegions`: an object with ``shape``, ``dtype``, NumPy
indexing by a tuple of slices and ``__array__``, such as a reader of a file's tensor that reads only the
bytes of the region asked for. Placing one reads it once, over the box that covers what this process's
devices hold, so a process of a multi-host run can read its part of a sharded tensor instead of the whole;
:class:`StackedRegions` stacks such values without reading them.

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

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np


class HostLeaf(jax.ShapeDtypeStruct):
    """An abstract template leaf to be filled with a value on the host, not placed on a device."""


@runtime_checkable
class HostRegions(Protocol):
    """A host value read region by region: ``value[index]`` (a tuple of slices, one per dimension) is that
    region as a NumPy array; ``np.asarray(value)`` is the whole."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def __getitem__(self, index: Any) -> np.ndarray: ...

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray: ...


def host_value(value: Any) -> np.ndarray | HostRegions:
    """``value`` kept on the host unread when it is a NumPy array or :class:`HostRegions` (not a JAX
    array), else as a NumPy array."""
    if isinstance(value, np.ndarray) or (isinstance(value, HostRegions) and not isinstance(value, jax.Array)):
        return value
    return np.asarray(value)


def target_sharding(raw) -> jax.sharding.Sharding | None:
    """The sharding an abstract template leaf asks its value to be placed on; None for any other leaf."""
    if isinstance(raw, jax.ShapeDtypeStruct) and isinstance(raw.sharding, jax.sharding.Sharding):
        return raw.sharding
    return None


def place_from_host(value: np.ndarray | HostRegions, sharding: jax.sharding.Sharding) -> jax.Array:
    """``value``, on the host, placed on ``sharding``: each of this process's devices gets only its slice
    (``jax.make_array_from_callback``). ``value`` is read once, over the smallest box that holds every slice
    this process's devices hold (``covering_region``): a process of a multi-host run whose devices hold a
    band of the rows reads that band only."""
    shape = tuple(value.shape)
    box = covering_region(list(sharding.addressable_devices_indices_map(shape).values()), shape)
    if all(s.stop > s.start for s in box):
        held = np.asarray(value[box])
    else:  # none of this process's devices holds any of it: nothing to read
        held = np.empty(tuple(s.stop - s.start for s in box), value.dtype)

    def region(index: tuple[slice, ...]) -> np.ndarray:
        return held[_within(index, box, shape)]

    return jax.make_array_from_callback(shape, sharding, region)


def covering_region(indices: Sequence[tuple[slice, ...]], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The smallest box (a slice per dimension, step 1) that holds every region of ``indices``.

    >>> covering_region([(slice(0, 2), slice(None)), (slice(4, 6), slice(None))], (8, 3))
    (slice(0, 6, None), slice(0, 3, None))
    """
    if not indices:
        return tuple(slice(0, 0) for _ in shape)
    bounds = [region_bounds(index, shape) for index in indices]
    return tuple(slice(min(b[d][0] for b in bounds), max(b[d][1] for b in bounds)) for d in range(len(shape)))


def _within(index: tuple[slice, ...], box: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[slice, ...]:
    """``index`` (a region inside ``box``) relative to the box's corner."""
    return tuple(
        slice(start - outer.start, stop - outer.start)
        for (start, stop), outer in zip(region_bounds(index, shape), box, strict=True)
    )


def region_bounds(index: Any, shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """A region's ``(start, stop)`` in each dimension of ``shape``, from ``index``: slices of step 1, at most
    one per dimension (as ``jax.make_array_from_callback`` asks); a ``TypeError`` for any other index.

    >>> region_bounds((slice(2, None),), (8, 3))
    [(2, 8), (0, 3)]
    """
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > len(shape) or not all(isinstance(s, slice) for s in index):
        raise TypeError(
            f"a host value of shape {shape} is read by at most {len(shape)} slices, got {index!r}"
        )
    bounds = []
    for s, n in zip((*index, *(slice(None),) * (len(shape) - len(index))), shape, strict=True):
        start, stop, step = s.indices(n)
        if step != 1:
            raise TypeError(f"a host value is read by slices of step 1, got {s!r}")
        bounds.append((start, max(start, stop)))
    return bounds


class StackedRegions:
    """``parts`` (host values of one shape and dtype) stacked along ``axis`` without reading them: a region
    reads only the parts it spans, and only their region.

    >>> parts = [np.full((2, 3), i) for i in range(4)]
    >>> stacked = StackedRegions(parts, axis=1)
    >>> stacked.shape, stacked[1:2, 2:4, 0:2].tolist()
    ((2, 4, 3), [[[2, 2], [3, 3]]])
    >>> bool((np.asarray(stacked) == np.stack(parts, axis=1)).all())
    True
    """

    def __init__(self, parts: Sequence[np.ndarray | HostRegions], axis: int):
        self.parts, self.axis = list(parts), axis
        first = self.parts[0]
        self.shape = (*first.shape[:axis], len(self.parts), *first.shape[axis:])
        self.dtype = np.dtype(first.dtype)

    def __getitem__(self, index: Any) -> np.ndarray:
        index = tuple(slice(start, stop) for start, stop in region_bounds(index, self.shape))
        within = index[: self.axis] + index[self.axis + 1 :]
        chosen = range(len(self.parts))[index[self.axis]]
        if not chosen:
            return np.empty(tuple(s.stop - s.start for s in index), self.dtype)
        return np.stack([np.asarray(self.parts[i][within]) for i in chosen], axis=self.axis)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[tuple(slice(None) for _ in self.shape)]
        return whole if dtype is None else whole.astype(dtype)
