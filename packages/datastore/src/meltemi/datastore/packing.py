"""Whole conversations packed into fixed-width rows: best-fit decreasing within blocks, the same for any
process count.

A chat store's conversations are never split: each row holds whole conversations one after another, then
padding. The packing is a pure function of the conversations' lengths (read from the store's offsets)
and the row width, so every process computes the same rows and reads only its own; the data order comes
later, from the shuffles of `ShuffledDataset` and `MixtureDataset` over these rows. Each block of
`block` consecutive conversations is packed on its own (longest first, each into the fullest row it
still fits, a new row when none does), which keeps the work linear in the store and a row's
conversations close together in it.

Within a row, conversation `j` has segment id `j` (attention stays inside a conversation) and positions
counting from 0 at its first token; padding is one more segment, weighs 0 and is never a target.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from meltemi.datastore.sequences import Rows
from meltemi.datastore.store import TokenStore, ragged_arange

PACKING_BLOCK = 4096  # conversations packed together: enough for a full packing, few enough to stay fast
PAD_TOKEN = 0


@dataclass(frozen=True)
class Packing:
    """Which conversations each row holds: row `r` is `members[row_starts[r]:row_starts[r + 1]]`, in order.

    >>> packing = pack_lengths(np.array([5, 3, 4, 2]), width=8)
    >>> [packing.row(r).tolist() for r in range(packing.num_rows)]
    [[0, 1], [2, 3]]
    >>> packing.fill(np.array([5, 3, 4, 2]), width=8)
    0.875
    """

    row_starts: np.ndarray
    members: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.row_starts) - 1

    def row(self, r: int) -> np.ndarray:
        return self.members[self.row_starts[r] : self.row_starts[r + 1]]

    def fill(self, lengths: np.ndarray, width: int) -> float:
        """The share of the rows' tokens that are conversation tokens, not padding."""
        return float(np.asarray(lengths).sum() / max(1, self.num_rows * width))


def pack_lengths(lengths: np.ndarray, width: int, block: int = PACKING_BLOCK) -> Packing:
    """Rows of at most `width` tokens holding every item of `lengths` whole, packed block by block (best
    fit, longest first; ties in store order), each row's items in store order.

    An item longer than `width` is a `ValueError` naming it: it fits no row.

    >>> packing = pack_lengths(np.array([2, 7, 3, 6, 1]), width=8, block=5)
    >>> [packing.row(r).tolist() for r in range(packing.num_rows)]
    [[1, 4], [0, 3], [2]]
    """
    lengths = np.asarray(lengths, np.int64)
    if width < 1 or block < 1:
        raise ValueError(f"width and block must be positive, got {width} and {block}")
    too_long = np.flatnonzero(lengths > width)
    if too_long.size:
        first = int(too_long[0])
        raise ValueError(
            f"conversation {first} has {int(lengths[first])} tokens, more than a row of {width} holds "
            f"({too_long.size} such conversations)"
        )
    rows: list[np.ndarray] = []
    for start in range(0, len(lengths), block):
        rows += _best_fit_decreasing(lengths[start : start + block], width, offset=start)
    sizes = np.array([len(row) for row in rows], np.int64)
    members = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    return Packing(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), members)


def _best_fit_decreasing(lengths: np.ndarray, width: int, offset: int) -> list[np.ndarray]:
    """One block's rows: each item, longest first, into the row with the least room that still fits it."""
    order = np.argsort(-lengths, kind="stable")
    room: list[tuple[int, int]] = []  # (free tokens, row number), sorted
    members: list[list[int]] = []
    for item, length in zip(order.tolist(), lengths[order].tolist(), strict=True):
        at = bisect.bisect_left(room, (length, -1))
        if at == len(room):
            members.append([item])
            free, row = width - length, len(members) - 1
        else:
            free, row = room.pop(at)
            members[row].append(item)
            free -= length
        bisect.insort(room, (free, row))
    return [np.sort(np.array(row, np.int64)) + offset for row in members]


class PackedDataset:
    """A chat store's conversations `[first, stop)` packed whole into rows of `seq_len + 1` tokens, with
    segment ids, per-conversation positions and loss weights: the rows a `BatchLoader` reads (inputs are a
    row's first `seq_len` tokens, targets its last `seq_len`).

    `fill` is the share of the rows' tokens that are conversation tokens; `report()` says it in words.
    """

    def __init__(self, store: TokenStore, seq_len: int, first: int = 0, stop: int | None = None):
        if not store.is_chat:
            raise ValueError(
                f"{store.path} is a {store.format} store; packing whole conversations needs a chat one"
            )
        stop = store.num_docs if stop is None else stop
        if not 0 <= first < stop <= store.num_docs:
            raise ValueError(f"conversations [{first}, {stop}) are empty or outside [0, {store.num_docs})")
        self.store, self.seq_len, self.first, self.stop = store, seq_len, first, stop
        self.offsets = np.asarray(store.offsets[first : stop + 1], np.int64)
        self.lengths = np.diff(self.offsets)
        try:
            self.packing = pack_lengths(self.lengths, seq_len + 1)
        except ValueError as e:
            kept = store.manifest.get("chat", {}).get("max_tokens")
            how = (
                f"it keeps conversations of up to {kept} tokens: read it in rows of at least {kept} tokens"
                if kept
                else "it keeps conversations of any length"
            )
            raise ValueError(
                f"{store.path}: {e}; {how}, or rebuild it with max_tokens {seq_len + 1} (longer "
                "ones are cut or "
                "dropped, counted)"
            ) from None
        self.num_sequences = self.packing.num_rows
        self.fill = self.packing.fill(self.lengths, seq_len + 1)

    def __len__(self) -> int:
        return self.num_sequences

    def report(self) -> str:
        """``1,204 conversations in 231 rows of 513 tokens, 94.1% filled``."""
        return (
            f"{len(self.lengths):,} conversations in {self.num_sequences:,} rows of {self.seq_len + 1} "
            f"tokens, {100 * self.fill:.1f}% filled"
        )

    def read(self, indices: np.ndarray) -> Rows:
        """The rows at `indices` (any order, repeats allowed), their conversations read in one request."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.num_sequences):
            raise IndexError(
                f"row indices {indices.min()}..{indices.max()} outside [0, {self.num_sequences}) "
                f"({len(self.lengths)} conversations packed in rows of {self.seq_len + 1})"
            )
        starts = self.packing.row_starts[indices]
        counts = self.packing.row_starts[indices + 1] - starts
        members = self.packing.members[np.repeat(starts, counts) + ragged_arange(counts)]
        lengths = self.lengths[members]
        spans = self.store.read_spans(self.offsets[members], lengths)
        rows, width = len(indices), self.seq_len + 1
        token_row = np.repeat(np.repeat(np.arange(rows), counts), lengths)
        used = np.bincount(token_row, minlength=rows)
        column = np.arange(len(token_row)) - np.concatenate([[0], np.cumsum(used)[:-1]])[token_row]
        tokens = np.full((rows, width), PAD_TOKEN, spans.tokens.dtype)
        tokens[token_row, column] = spans.tokens
        segment_ids = np.repeat(counts.astype(np.int32)[:, None], width, axis=1)  # padding: one more segment
        segment_ids[token_row, column] = np.repeat(ragged_arange(counts), lengths)
        positions = np.arange(width, dtype=np.int32)[None, :] - used[:, None].astype(np.int32)  # padding's
        positions[token_row, column] = ragged_arange(lengths)
        weights = np.zeros((rows, width), np.uint8)
        weights[token_row, column] = spans.weights
        return Rows(tokens, segment_ids, np.zeros(rows, np.int32), positions, weights)


def hold_out_conversations(
    store: TokenStore, seq_len: int, fraction: float
) -> tuple[PackedDataset, PackedDataset]:
    """`(train, held_out)`: the store's last `fraction` of conversations (at least one) held out, each part
    packed on its own, so no conversation is in both and the split never depends on the seed.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must lie in (0, 1), got {fraction}")
    total = store.num_docs
    if total < 2:
        raise ValueError(
            f"a held-out split needs at least 2 conversations (one to train on, one to hold out), "
            f"{store.path} has {total}"
        )
    held = min(total - 1, max(1, round(total * fraction)))
    return PackedDataset(store, seq_len, 0, total - held), PackedDataset(store, seq_len, total - held, total)
