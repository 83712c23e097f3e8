"""Fixed-length training sequences over a token store, with per-token document segment ids and positions."""

from dataclasses import dataclass, replace

import numpy as np

from meltemi.datastore.store import TokenStore, ragged_arange


@dataclass(frozen=True)
class Rows:
    """Sequences read from a dataset: `tokens`, `segment_ids`, `positions`, `weights` `(rows, seq_len + 1)`;
    `source` `(rows,)`.

    A row's segment ids count documents from 0 at its first token, so attention can be masked to stay
    within a document; `positions` are each token's position for the positional encoding (None: counted
    from each row's first token); `weights` are each token's loss weight as a target (None: 1 everywhere;
    a chat store's rows weigh the assistant's tokens 1 and the rest 0); `source` says which mixture source
    each row came from (0 outside a mixture).

    >>> rows = Rows(np.zeros((1, 4), np.uint16), np.array([[0, 0, 1, 1]], np.int32), np.zeros(1, np.int32))
    >>> filled = rows.filled()
    >>> filled.positions.tolist(), filled.weights.tolist()
    ([[0, 1, 2, 3]], [[1, 1, 1, 1]])
    """

    tokens: np.ndarray
    segment_ids: np.ndarray
    source: np.ndarray
    positions: np.ndarray | None = None
    weights: np.ndarray | None = None

    def filled(self) -> "Rows":
        """These rows with `positions` and `weights` given explicitly where they were left at their "
        "defaults."""
        rows, width = self.tokens.shape
        positions = self.positions
        if positions is None:
            positions = np.broadcast_to(np.arange(width, dtype=np.int32), (rows, width))
        weights = self.weights if self.weights is not None else np.ones((rows, width), np.uint8)
        return replace(self, positions=positions, weights=weights)


class SequenceDataset:
    """Sequence `i` is the `seq_len + 1` tokens from position `i * seq_len` of the store's token stream.

    Consecutive sequences overlap by one token, so the inputs and targets of all sequences together cover
    the stream exactly once. Positions count from each row's first token, or, with `reset_positions`, from
    each document's first token within the row (the first document of a row, which began in an earlier
    row, counts from the row's start).

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

    def __init__(self, store: TokenStore, seq_len: int, reset_positions: bool = False):
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        if store.is_chat:
            raise ValueError(
                f"{store.path} is a chat store: its conversations are packed whole into rows "
                "(PackedDataset), not read as a stream of tokens"
            )
        if store.num_tokens < seq_len + 1:
            raise ValueError(
                f"{store.path} holds {store.num_tokens} tokens, fewer than one sequence of {seq_len + 1}"
            )
        self.store, self.seq_len, self.reset_positions = store, seq_len, reset_positions
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
        positions = positions_within_segments(segment_ids) if self.reset_positions else None
        return Rows(windows.tokens, segment_ids, np.zeros(len(indices), np.int32), positions)


def positions_within_segments(segment_ids: np.ndarray) -> np.ndarray:
    """Each token's position within its segment (a run of equal ids along the last axis), from 0.

    >>> positions_within_segments(np.array([[0, 0, 1, 1, 1, 2]])).tolist()
    [[0, 1, 0, 1, 2, 0]]
    """
    segment_ids = np.asarray(segment_ids)
    index = np.arange(segment_ids.shape[-1])
    starts = np.ones(segment_ids.shape, bool)
    starts[..., 1:] = segment_ids[..., 1:] != segment_ids[..., :-1]
    first = np.maximum.accumulate(np.where(starts, index, 0), axis=-1)
    return (index - first).astype(np.int32)


def segment_ids_from_boundaries(
    rows: int, width: int, boundary_rows: np.ndarray, boundary_positions: np.ndarray
) -> np.ndarray:
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
