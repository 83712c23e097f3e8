"""Endless shuffled epochs over a dataset: epoch `e` is a fresh keyed Feistel permutation of it."""

import numpy as np

from meltemi.datastore.feistel import FeistelPermutation
from meltemi.datastore.keys import derive_key
from meltemi.datastore.sequences import Rows, SequenceDataset


def epoch_permute(indices: np.ndarray, size: int, key: int, window: int | None = None) -> np.ndarray:
    """Map positions in an endless stream of epochs to items: position `p` is in epoch `p // size`.

    >>> a = epoch_permute(np.arange(6), 3, key=1)
    >>> sorted(a[:3].tolist()) == sorted(a[3:].tolist()) == [0, 1, 2]
    True
    """
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and indices.min() < 0:
        raise IndexError(f"positions must be non-negative, got {indices.min()}")
    epochs, within = np.divmod(indices, size)
    out = np.empty_like(indices)
    for epoch in np.unique(epochs).tolist():
        mask = epochs == epoch
        out[mask] = FeistelPermutation(size, derive_key(key, "epoch", epoch), window)(within[mask])
    return out


class ShuffledDataset:
    """A dataset read in shuffled order, epoch after epoch; `window` limits shuffling to eras of that length.

    It has no end: position `p` is item `perm_e(p % n)` of epoch `e = p // n`.

    >>> class Toy:
    ...     num_sequences = 5
    ...     def read(self, indices):
    ...         return Rows(indices[:, None], indices[:, None], np.zeros(len(indices), np.int32))
    >>> rows = ShuffledDataset(Toy(), key=3).read(np.arange(5))
    >>> sorted(rows.tokens[:, 0].tolist())
    [0, 1, 2, 3, 4]
    """

    num_sequences = None

    def __init__(self, dataset: SequenceDataset, key: int, window: int | None = None):
        self.dataset, self.key, self.window = dataset, key, window
        self.seq_len = getattr(dataset, "seq_len", None)

    def read(self, indices: np.ndarray) -> Rows:
        items = epoch_permute(indices, self.dataset.num_sequences, self.key, self.window)
        return self.dataset.read(items)
