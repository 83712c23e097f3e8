"""Fixed-length training sequences over a token store, with per-token document segment ids."""

from dataclasses import dataclass

import numpy as np

from meltemi.datastore.store import TokenStore, ragged_arange


@dataclass(frozen=True)
class Rows:
    """Sequences read from a dataset: `tokens`, `segment_ids` `(rows, seq_len + 1)`; `source` `(rows,)`.

    A row's segment ids count documents from 0 at its first token, so attention can be masked to stay
    within a document; `source` says which mixture source each row came from (0 outside a mixture).
    """

    tokens: np.ndarray
    segment_ids: np.ndarray
    source: np.ndarray


class SequenceDataset:
    """Sequence `i` is the `seq_len + 1` tokens from position `i * seq_len` of the store's token stream.

    Consecutive sequences overlap by one token, so the inputs and targets of all sequences together cover
    the stream exactly once.

    >>> import tempfile
    >>> from meltemi.datastore import TokenStore, build_store, corpora
    >>> tmp = tempfile.mkdtemp()
    >>> files = corpora.python_stdlib()[:10]
    >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
    >>> _ = build_store(files, tok, f"{tmp}/store", progress=False)
    >>> data = SequenceDataset(TokenStore.open(f"{tmp}/store"), seq_len=64)
    >>> rows = data.read(np.array([0, 1]))
    >>> rows.tokens.shape, bool(rows.tokens[0, -1] == rows.tokens[1, 0])
    ((2, 65), True)
    """

    def __init__(self, store: TokenStore, seq_len: int):
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if store.num_tokens < seq_len + 1:
            raise ValueError(
                f"{store.path} holds {store.num_tokens} tokens, fewer than one sequence of {seq_len + 1}"
            )
        self.store, self.seq_len = store, seq_len
        self.num_sequences = (store.num_tokens - 1) // seq_len

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        """Sequence `i` alone: `{"tokens", "segment_ids"}`, each `(seq_len + 1,)` (for PyTorch-style code)."""
        rows = self.read(np.array([range(self.num_sequences)[i]]))
        return {"tokens": rows.tokens[0], "segment_ids": rows.segment_ids[0]}

    def read(self, indices: np.ndarray) -> Rows:
        """The sequences at `indices` (any order, repeats allowed), read in one coalesced request."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_sequences):
            raise IndexError(
                f"sequence indices {indices.min()}..{indices.max()} outside [0, {self.num_sequences}) "
                f"(seq_len {self.seq_len} over {self.store.num_tokens} tokens)"
            )
        starts = indices * self.seq_len
        windows = self.store.read_windows(starts, self.seq_len + 1)
        segment_ids = segment_ids_from_boundaries(
            len(starts), self.seq_len + 1, windows.boundary_rows, windows.boundary_positions
        )
        return Rows(windows.tokens, segment_ids, np.zeros(len(indices), np.int32))


def segment_ids_from_boundaries(rows: int, width: int, boundary_rows, boundary_positions) -> np.ndarray:
    """Document index within each row: 0 from the row's first token, +1 at each boundary (in order).

    >>> segment_ids_from_boundaries(2, 4, np.array([0, 1, 1]), np.array([2, 1, 3])).tolist()
    [[0, 0, 1, 1], [0, 1, 1, 2]]
    """
    per_row = np.bincount(boundary_rows, minlength=rows)
    pieces = per_row + 1
    last_piece = np.cumsum(pieces) - 1
    ends = np.full(int(pieces.sum()), width, np.int64)
    is_boundary = np.ones(len(ends), bool)
    is_boundary[last_piece] = False
    ends[is_boundary] = boundary_positions
    begins = np.roll(ends, 1)
    begins[last_piece - per_row] = 0
    ids = ragged_arange(pieces).astype(np.int32)
    return np.repeat(ids, ends - begins).reshape(rows, width)
