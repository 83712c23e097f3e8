"""Fingerprints of the train state's arrays, the same whatever the mesh that held them, so a checkpoint can
record them as it is written (each process hashing only its shards) and anyone can recompute them later
from the arrays on disk.

An array's fingerprint is two 32-bit sums, modulo 2**32, of a mixing function of every element's bits and
its position in the whole array (row-major). Sums do not depend on the order of their terms, so each
process adds up its own shards and the first process adds up the processes' sums. A changed, swapped or
moved element changes a sum (but for a 2**-64 chance); it is an audit of equality, not a cryptographic MAC.

>>> import numpy as np
>>> x = np.arange(12, dtype=np.float32).reshape(3, 4)
>>> whole = array_fingerprint(x)
>>> halves = [shard_sums(x[:2], (slice(0, 2), slice(0, 4)), x.shape),
...           shard_sums(x[2:], (slice(2, 3), slice(0, 4)), x.shape)]
>>> combine(halves) == whole, array_fingerprint(x.T.copy()) == whole
(True, False)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

_LANES = (np.uint32(0x9E3779B9), np.uint32(0x85EBCA77))


def _words(data: np.ndarray) -> np.ndarray:
    """Each element's bits as one uint32 (arrays of 1, 2 or 4 bytes per element), row-major."""
    data = np.ascontiguousarray(data)
    size = data.dtype.itemsize
    if size == 4:
        return data.view(np.uint32).reshape(-1)
    if size in (1, 2):
        return data.view(np.uint8 if size == 1 else np.uint16).reshape(-1).astype(np.uint32)
    raise ValueError(f"cannot fingerprint {data.dtype} arrays (elements of {size} bytes)")


def _mix(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser, elementwise, modulo 2**32."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def _positions(index: Sequence[slice], shape: Sequence[int]) -> np.ndarray:
    """The row-major positions (modulo 2**32) in an array of ``shape`` of the block ``index`` selects."""
    flat = np.zeros((), np.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        start, stop, _ = index[axis].indices(shape[axis])
        along = np.arange(start, stop, dtype=np.uint64) * np.uint64(stride) % np.uint64(2**32)
        flat = np.add.outer(along.astype(np.uint32), flat)
        stride *= shape[axis]
    return flat.reshape(-1)


def shard_sums(data: np.ndarray, index: Sequence[slice], shape: Sequence[int]) -> tuple[int, int]:
    """The two sums of the block ``data`` at ``index`` of an array of ``shape`` (``index``: one slice per
    axis, as ``jax.Shard.index`` gives it)."""
    with np.errstate(over="ignore"):
        words, positions = _words(data), _positions(index, shape)
        lanes = []
        for multiplier in _LANES:
            terms = _mix(words ^ _mix(positions * multiplier + multiplier))
            lanes.append(int(terms.sum(dtype=np.uint64) % 2**32))
    return lanes[0], lanes[1]


def combine(parts: Iterable[tuple[int, int]]) -> str:
    """The fingerprint (16 hex digits) of an array from the sums of its blocks (each element in one)."""
    first = second = 0
    for a, b in parts:
        first, second = (first + a) % 2**32, (second + b) % 2**32
    return f"{first:08x}{second:08x}"


def array_fingerprint(array: np.ndarray) -> str:
    """The fingerprint of a whole array."""
    array = np.asarray(array)
    return combine([shard_sums(array, tuple(slice(0, n) for n in array.shape), array.shape)])


def state_digest(fingerprints: Iterable[tuple[str, str]]) -> str:
    """One SHA-256 of a state from its arrays' ``(name, fingerprint)``: equal digests, equal states.

    >>> state_digest([("step", "00")]) != state_digest([("step", "01")])
    True
    """
    text = "".join(f"{name} {fingerprint}\n" for name, fingerprint in sorted(fingerprints))
    return hashlib.sha256(text.encode()).hexdigest()
