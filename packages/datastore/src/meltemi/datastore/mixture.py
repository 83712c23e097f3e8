"""Block-deterministic mixtures of datasets, with weights that may change in stages.

Every block of `block_size` sequences takes a fixed count from each source (largest-remainder rounding of
the stage's weights), so how many sequences any source has given before any block is a closed-form sum,
and appending a stage never changes a sequence before it. Within a block the slots are shuffled by a
keyed Feistel permutation; each source is read in shuffled epochs of its own.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from meltemi.datastore.feistel import FeistelPermutation
from meltemi.datastore.keys import derive_key
from meltemi.datastore.sequences import Rows, SequenceDataset
from meltemi.datastore.shuffle import epoch_permute

Weights = Mapping[str, float]


def block_counts(weights: Sequence[float], block_size: int) -> np.ndarray:
    """Integer counts summing to `block_size`, as close to proportional to `weights` as rounding allows.

    >>> block_counts([0.5, 0.3, 0.2], 7).tolist()
    [4, 2, 1]
    """
    w = np.asarray(weights, dtype=np.float64)
    quotas = w / w.sum() * block_size
    counts = np.floor(quotas).astype(np.int64)
    short = block_size - int(counts.sum())
    counts[np.argsort(-(quotas - counts), kind="stable")[:short]] += 1
    return counts


class MixtureDataset:
    """Sequences drawn from named sources by weight, block by block; it has no end.

    `weights` is one `{name: weight}` for the whole run, or stages `[(start_sequence, {name: weight}), ...]`
    whose starts are multiples of `block_size`, the first 0. Names left out of a stage weigh 0.

    >>> class Toy:
    ...     def __init__(self, n): self.num_sequences, self.seq_len = n, 1
    ...     def read(self, i): return Rows(i[:, None], i[:, None] * 0, np.zeros(len(i), np.int32))
    >>> mix = MixtureDataset({"a": Toy(10), "b": Toy(3)}, {"a": 0.75, "b": 0.25}, block_size=4, key=0)
    >>> np.bincount(mix.read(np.arange(8)).source).tolist()
    [6, 2]
    """

    num_sequences = None

    def __init__(
        self,
        sources: Mapping[str, SequenceDataset],
        weights: Weights | Sequence[tuple[int, Weights]],
        block_size: int,
        key: int,
    ):
        if not sources:
            raise ValueError("a mixture needs at least one source")
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.names = list(sources)
        self.sources = [sources[n] for n in self.names]
        for name, source in zip(self.names, self.sources, strict=True):
            if not isinstance(getattr(source, "num_sequences", None), int) or source.num_sequences < 1:
                raise ValueError(
                    f"mixture source {name!r} must be a finite, non-empty dataset (it is shuffled "
                    "in epochs of its own), such as a SequenceDataset"
                )
        seq_lens = {getattr(s, "seq_len", None) for s in self.sources}
        if len(seq_lens) > 1:
            raise ValueError(f"mixture sources have different sequence lengths: {sorted(map(str, seq_lens))}")
        self.seq_len = seq_lens.pop()
        self.block_size, self.key = block_size, key
        stages = [(0, weights)] if isinstance(weights, Mapping) else list(weights)
        self.stage_starts, self.stage_counts = self._check_stages(stages)
        self._label_starts = np.concatenate(
            [np.zeros((len(stages), 1), np.int64), np.cumsum(self.stage_counts, axis=1)], axis=1
        )

    def _check_stages(self, stages) -> tuple[np.ndarray, np.ndarray]:
        if not stages:
            raise ValueError("a mixture needs at least one stage of weights")
        starts, counts = [], []
        for start, weights in stages:
            if start % self.block_size:
                raise ValueError(f"stage start {start} is not a multiple of block_size {self.block_size}")
            unknown = set(weights) - set(self.names)
            if unknown:
                raise ValueError(
                    f"stage at {start} weighs unknown sources {sorted(unknown)}; known: {self.names}"
                )
            row = [float(weights.get(n, 0.0)) for n in self.names]
            if min(row) < 0 or not sum(row) > 0:
                raise ValueError(
                    f"stage at {start}: weights must be non-negative with a positive sum, got {weights}"
                )
            starts.append(start // self.block_size)
            counts.append(block_counts(row, self.block_size))
        if starts[0] != 0 or any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError(f"stage starts must begin at 0 and increase, got {[s for s, _ in stages]}")
        return np.array(starts, np.int64), np.array(counts, np.int64)

    def composition(self, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each block: its stage, and how many sequences each source gave before it (closed form)."""
        block = np.asarray(block, dtype=np.int64)
        stage = np.searchsorted(self.stage_starts, block, side="right") - 1
        ends = np.r_[self.stage_starts[1:], np.iinfo(np.int64).max]
        blocks_in_stage = np.clip(block[:, None] - self.stage_starts[None, :], 0, ends - self.stage_starts)
        return stage, blocks_in_stage @ self.stage_counts

    def assign(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which source each mixture position draws from, and that source's draw number."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and indices.min() < 0:
            raise IndexError(f"mixture positions must be non-negative, got {indices.min()}")
        block = indices // self.block_size
        label = np.zeros_like(indices)
        if indices.size:
            # One era-shuffle over whole blocks: every block gets its own keyed permutation of its slots,
            # and with no partial last window the result does not depend on how far `size` reaches.
            size = (int(block.max()) + 1) * self.block_size
            slots = FeistelPermutation(size, derive_key(self.key, "block-slots"), window=self.block_size)
            label = slots(indices) - block * self.block_size
        stage, drawn_before = self.composition(block)
        starts = self._label_starts[stage]
        source = (starts[:, 1:] <= label[:, None]).sum(axis=1)
        rows = np.arange(len(indices))
        draw = drawn_before[rows, source] + label - starts[rows, source]
        return source, draw

    def read(self, indices: np.ndarray) -> Rows:
        source, draw = self.assign(indices)
        parts = {}
        for s in np.unique(source).tolist():
            dataset, name = self.sources[s], self.names[s]
            items = epoch_permute(
                draw[source == s], dataset.num_sequences, derive_key(self.key, "source", name)
            )
            parts[s] = dataset.read(items)
        if not parts:
            empty = np.zeros((0, (self.seq_len or 0) + 1), np.uint32)
            return Rows(empty, empty.astype(np.int32), np.zeros(0, np.int32))
        if all(p.positions is None and p.weights is None for p in parts.values()):
            return self._joined(source, parts, ("tokens", "segment_ids"))
        parts = {s: rows.filled() for s, rows in parts.items()}  # a chat source among them: say every value
        return self._joined(source, parts, ("tokens", "segment_ids", "positions", "weights"))

    @staticmethod
    def _joined(source: np.ndarray, parts: dict[int, Rows], fields: tuple[str, ...]) -> Rows:
        """Each source's rows put back in the order of the mixture positions they were read for."""
        joined = {}
        for field in fields:
            values = [getattr(rows, field) for rows in parts.values()]
            out = np.empty((len(source), values[0].shape[1]), np.result_type(*(v.dtype for v in values)))
            for s, value in zip(parts, values, strict=True):
                out[source == s] = value
            joined[field] = out
        joined["segment_ids"] = joined["segment_ids"].astype(np.int32, copy=False)
        return Rows(source=source.astype(np.int32), **joined)
