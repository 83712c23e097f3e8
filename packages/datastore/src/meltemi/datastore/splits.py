"""Held-out splits: a contiguous range of a finite dataset's sequences, seen as a dataset of its own.

The held-out part is the tail of the token stream, so it shares no document with the training part
except the one document that straddles the cut (and, since consecutive sequences overlap by one token,
that cut's single token). It never depends on how many processes read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from meltemi.datastore.sequences import Rows

if TYPE_CHECKING:
    from meltemi.datastore.loader import Dataset


class SequenceRange:
    """Sequences `[start, stop)` of a finite dataset, renumbered from 0.

    >>> class Toy:
    ...     num_sequences, seq_len = 10, 1
    ...     def read(self, i): return Rows(i[:, None], i[:, None] * 0, np.zeros(len(i), np.int32))
    >>> tail = SequenceRange(Toy(), 7, 10)
    >>> tail.num_sequences, tail.read(np.arange(3)).tokens.ravel().tolist()
    (3, [7, 8, 9])
    """

    def __init__(self, dataset, start: int, stop: int):
        total = getattr(dataset, "num_sequences", None)
        if not isinstance(total, int):
            raise ValueError("SequenceRange needs a finite dataset (one with an integer num_sequences)")
        if not 0 <= start < stop <= total:
            raise ValueError(f"sequence range [{start}, {stop}) is empty or outside [0, {total})")
        self.dataset, self.start, self.stop = dataset, start, stop
        self.num_sequences = stop - start
        self.seq_len = getattr(dataset, "seq_len", None)
        self.store = getattr(dataset, "store", None)

    def __len__(self) -> int:
        return self.num_sequences

    def read(self, indices) -> Rows:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_sequences):
            raise IndexError(
                f"sequence indices {indices.min()}..{indices.max()} outside [0, {self.num_sequences}) "
                f"of the range [{self.start}, {self.stop})"
            )
        return self.dataset.read(indices + self.start)


def hold_out(dataset: Dataset, fraction: float) -> tuple[SequenceRange, SequenceRange]:
    """`(train, held_out)`: the last `fraction` of `dataset`'s sequences (at least one) held out.

    >>> class Toy:
    ...     num_sequences, seq_len = 100, 1
    ...     def read(self, i): return Rows(i[:, None], i[:, None] * 0, np.zeros(len(i), np.int32))
    >>> train, held_out = hold_out(Toy(), 0.05)
    >>> train.num_sequences, held_out.num_sequences, held_out.start
    (95, 5, 95)
    """
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must lie in (0, 1), got {fraction}")
    total = getattr(dataset, "num_sequences", None)
    if not isinstance(total, int) or total < 2:
        raise ValueError(
            f"a held-out split needs at least 2 sequences (one to train on, one to hold out), "
            f"the dataset has {total}"
        )
    held = min(total - 1, max(1, round(total * fraction)))
    return SequenceRange(dataset, 0, total - held), SequenceRange(dataset, total - held, total)
