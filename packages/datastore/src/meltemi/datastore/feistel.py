"""A keyed bijection on `range(n)`: a Feistel network with cycle-walking, vectorised over numpy arrays.

It shuffles without storing a permutation (O(1) memory), and any index maps in O(1) expected time, so
every host computes exactly the entries it needs.
"""

import numpy as np

from meltemi.datastore.keys import derive_key

_MAX_SIZE = 1 << 62
_U64 = np.uint64


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a fast 64-bit avalanche (every input bit flips about half the output)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


class _Network:
    """A balanced Feistel network on `2 * half_bits` bits, walked until it lands below `size`."""

    def __init__(self, size: int, round_keys: list[int]):
        self.size = size
        self.half_bits = max(1, ((size - 1).bit_length() + 1) // 2)
        self.mask = _U64((1 << self.half_bits) - 1)
        self.round_keys = [_U64(k) for k in round_keys]

    def _encrypt(self, x: np.ndarray, salt: np.ndarray) -> np.ndarray:
        left, right = x >> _U64(self.half_bits), x & self.mask
        for round_key in self.round_keys:
            left, right = right, left ^ (_mix(right ^ salt ^ round_key) & self.mask)
        return (left << _U64(self.half_bits)) | right

    def __call__(self, x: np.ndarray, salt: np.ndarray) -> np.ndarray:
        y = self._encrypt(x, salt)
        outside = np.flatnonzero(y >= _U64(self.size))
        while outside.size:
            y[outside] = self._encrypt(y[outside], salt[outside])
            outside = outside[y[outside] >= _U64(self.size)]
        return y


class FeistelPermutation:
    """A keyed permutation of `range(n)`; with `window`, it permutes only within windows of that length.

    With a window (an "era shuffle"), index `i` stays in `[w * window, (w + 1) * window)` for
    `w = i // window`, and each window gets its own key, so neighbours in time stay neighbours.

    >>> perm = FeistelPermutation(10, key=7)
    >>> sorted(perm(np.arange(10)).tolist()) == list(range(10))
    True
    >>> era = FeistelPermutation(10, key=7, window=4)
    >>> bool(np.all(era(np.arange(8)) // 4 == np.arange(8) // 4))
    True
    """

    def __init__(self, n: int, key: int, window: int | None = None, rounds: int = 6):
        if not 1 <= n <= _MAX_SIZE:
            raise ValueError(f"FeistelPermutation needs 1 <= n <= 2**62, got n={n}")
        if window is not None and window < 1:
            raise ValueError(f"window must be a positive length, got {window}")
        self.n, self.key, self.window = int(n), int(key), None if window is None else min(int(window), n)
        round_keys = [derive_key(key, "feistel-round", r) for r in range(rounds)]
        span = self.n if self.window is None else self.window
        self._full = _Network(span, round_keys)
        tail = self.n % span
        self._tail = _Network(tail, round_keys) if tail else None

    def __len__(self) -> int:
        return self.n

    def __call__(self, index: np.ndarray | int) -> np.ndarray:
        """Where each index goes; `index` may be any integer array with values in `range(n)`."""
        index = np.asarray(index)
        flat = index.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self.n):
            raise IndexError(f"permutation indices must lie in [0, {self.n}), got {flat.min()}..{flat.max()}")
        x = flat.astype(_U64)
        span = _U64(self._full.size)
        window_id = x // span
        start = window_id * span
        salt = _mix(window_id + _U64(0x9E3779B97F4A7C15))
        out = np.empty_like(x)
        in_tail = start + span > _U64(self.n)
        full = ~in_tail
        out[full] = start[full] + self._full(x[full] - start[full], salt[full])
        if self._tail is not None and in_tail.any():
            out[in_tail] = start[in_tail] + self._tail(x[in_tail] - start[in_tail], salt[in_tail])
        return out.astype(np.int64).reshape(index.shape)
