"""`batch(step)`: each process's rows of the global batch at a step, as a pure function of the step.

The global batch at step `s` is the dataset's positions `[first_row(s), first_row(s) + size(s))`, where
the batch size may follow a schedule; process `p` of `P` takes the `p`-th contiguous `size(s) / P` of it.
So the union over processes is the single-process batch, whatever the process count, and a restart at
any step reads exactly what an uninterrupted run would have.
"""

import numbers
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from meltemi.datastore.sequences import Rows


class Dataset(Protocol):
    """What the loader reads: `read(indices)` gives rows; `num_sequences` is the length (None: endless)."""

    num_sequences: int | None

    def read(self, indices: np.ndarray) -> Rows: ...


class BatchSchedule:
    """Global batch size by step: a constant, or `[(start_step, size), ...]` with the first start at 0.

    >>> s = BatchSchedule([(0, 4), (10, 8)])
    >>> s.size(12), s.first_row(12)
    (8, 56)
    """

    def __init__(self, batch_size: int | Sequence[tuple[int, int]]):
        if isinstance(batch_size, numbers.Integral):
            stages = [(0, int(batch_size))]
        else:
            stages = [(int(start), int(size)) for start, size in batch_size]
        if not stages or stages[0][0] != 0:
            raise ValueError(f"a batch-size schedule must start at step 0, got {batch_size}")
        if any(b[0] <= a[0] for a, b in zip(stages, stages[1:], strict=False)):
            raise ValueError(f"batch-size schedule steps must increase, got {batch_size}")
        if any(size < 1 for _, size in stages):
            raise ValueError(f"batch sizes must be positive, got {batch_size}")
        self.starts = np.array([s for s, _ in stages], np.int64)
        self.sizes = np.array([b for _, b in stages], np.int64)
        self._rows_before = np.r_[0, np.cumsum(np.diff(self.starts) * self.sizes[:-1])]

    def _stage(self, step: int) -> int:
        if step < 0:
            raise ValueError(f"steps are non-negative, got {step}")
        return int(np.searchsorted(self.starts, step, side="right") - 1)

    def size(self, step: int) -> int:
        return int(self.sizes[self._stage(step)])

    def first_row(self, step: int) -> int:
        stage = self._stage(step)
        return int(self._rows_before[stage] + (step - self.starts[stage]) * self.sizes[stage])


class BatchLoader:
    """Batches of `input_ids`, `targets`, `segment_ids`, `positions`, `loss_mask` (each `(rows, seq_len)`)
    and `source`.

    `loss_mask` is True where the target is in the same document as its input and weighs more than 0: the
    one pair per document boundary (a document's last token, then the next one's first) teaches nothing
    and is masked out, and so is every target of a chat row that is not the assistant's. `positions` are
    the inputs' positions for the positional encoding. `source` (`(rows,)`) says which mixture source
    each row came from.

    >>> class Toy:
    ...     num_sequences = None
    ...     def read(self, i):
    ...         t = np.stack([i, i + 1], axis=1)
    ...         return Rows(t, t * 0, np.zeros(len(i), np.int32))
    >>> BatchLoader(Toy(), 4, process_index=1, process_count=2).batch(3)["input_ids"].ravel().tolist()
    [14, 15]
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | Sequence[tuple[int, int]],
        process_index: int = 0,
        process_count: int = 1,
        prefetch: int = 2,
    ):
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index must lie in [0, {process_count}), got {process_index}")
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self.dataset, self.schedule = dataset, BatchSchedule(batch_size)
        self.process_index, self.process_count, self.prefetch = process_index, process_count, prefetch

    def rows(self, step: int) -> np.ndarray:
        """The dataset positions this process reads at `step`."""
        size = self.schedule.size(step)
        if size % self.process_count:
            raise ValueError(
                f"step {step}: global batch size {size} does not split over {self.process_count} processes"
            )
        local = size // self.process_count
        start = self.schedule.first_row(step) + self.process_index * local
        positions = np.arange(start, start + local, dtype=np.int64)
        total = self.dataset.num_sequences
        if total is not None and positions.size and positions[-1] >= total:
            raise IndexError(
                f"step {step} needs sequence {positions[-1]} but the dataset has {total}; "
                "wrap it in ShuffledDataset (endless epochs) or train for fewer steps"
            )
        return positions

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of the global batch at `step`."""
        rows = self.dataset.read(self.rows(step)).filled()
        same_document = rows.segment_ids[:, 1:] == rows.segment_ids[:, :-1]
        return {
            "input_ids": rows.tokens[:, :-1],
            "targets": rows.tokens[:, 1:],
            "segment_ids": rows.segment_ids[:, :-1],
            "positions": rows.positions[:, :-1],
            "loss_mask": same_document & (rows.weights[:, 1:] > 0),
            "source": rows.source,
        }

    def iterate(self, start_step: int = 0, stop_step: int | None = None) -> Iterator[tuple[int, dict]]:
        """`(step, batch(step))` from `start_step`, read ahead by a background thread (at most `prefetch`)."""
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def offer(item) -> bool:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def produce():
            step = start_step
            while stop_step is None or step < stop_step:
                try:
                    item = (step, self.batch(step))
                except BaseException as error:
                    offer(error)
                    return
                if not offer(item):
                    return
                step += 1
            offer(None)

        worker = threading.Thread(target=produce, name="meltemi-datastore-prefetch", daemon=True)
        worker.start()
        try:
            while (item := ready.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            worker.join()
