"""Tokenizer identity, and the unit of build work: tokenize a few sources into a part file.

A part is three objects written through the storage seam (each one atomic PUT: written aside and renamed
on a local disk), its JSON summary last, so a part either exists whole or not at all: that is what lets a
killed build resume where it stopped, on a local disk or in a bucket.
"""

from __future__ import annotations

import io
import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer

from meltemi.datastore.build.inputs.compression import object_path
from meltemi.datastore.build.inputs.files import Piece, redact, stamp_of
from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy, read_documents
from meltemi.datastore.build.long_documents import pieces_of
from meltemi.datastore.build.records import PartSummary
from meltemi.datastore.errors import InputError, Remedy, SourceChangedError, Way
from meltemi.datastore.layout import token_dtype
from meltemi.datastore.storage import Directory, Location
from meltemi.datastore.tokenizer_file import parse_tokenizer, read_tokenizer_text, tokenizer_digest

if TYPE_CHECKING:
    from meltemi.datastore.chat.conversations import Conversation
    from meltemi.datastore.chat.recipe import ChatRecipe

ENCODE_BATCH = 512  # documents read before they are tokenized together
BATCH_CHARACTERS = 1 << 20  # about the characters tokenized at once (and read before tokenizing)
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[SEP]")


@dataclass(frozen=True)
class TokenizerInfo:
    """What a store records about its tokenizer: where it came from, its content hash, sizes, EOS id."""

    name: str
    sha256: str
    vocab_size: int
    eos_id: int | None
    json: str

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        eos: bool = True,
        eos_token: str | None = None,
    ) -> TokenizerInfo:
        """Read a `tokenizer.json` (a path, or any URL `tokenizer_file` reads) and find its end-of-document
        token; a missing one is an error whose remedies name one or go without."""
        shown = redact(os.fspath(path))
        text = read_tokenizer_text(path)
        sha256 = tokenizer_digest(text, shown)  # not JSON: an error naming the file, not json's own
        tokenizer = parse_tokenizer(text, shown, sha256)
        eos_id = _find_eos(tokenizer, shown, eos_token) if eos else None
        return cls(
            name=Path(
                object_path(os.fspath(path))
            ).name,  # a presigned URL's query is neither name nor secret
            sha256=sha256,
            vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
            eos_id=eos_id,
            json=text,
        )

    def identity(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
        }


def _find_eos(tokenizer: Tokenizer, path: str, eos_token: str | None) -> int:
    candidates = (eos_token,) if eos_token is not None else EOS_CANDIDATES
    for token in candidates:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    wanted = repr(eos_token) if eos_token is not None else "any of " + ", ".join(EOS_CANDIDATES)
    remedy = Remedy("; pass {}", (Way({"eos_token": "TOKEN"}), Way({"eos": False})))
    raise InputError(f"tokenizer {path!r} has no end-of-document token ({wanted})", remedies=(remedy,))


def tokenizer_of(info: TokenizerInfo) -> Tokenizer:
    """The parsed tokenizer `info` records (parsed once per process, in each worker too)."""
    return parse_tokenizer(info.json, info.name, info.sha256)


def encode_documents(
    tokenizer: Tokenizer, texts: list[str], eos_id: int | None, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of `texts`, concatenated (an EOS after each when `eos_id` is set), and each one's length.

    A long document is tokenized in pieces that give the same ids (`long_documents.pieces_of`), and pieces
    go to `encode_batch` about `BATCH_CHARACTERS` at a time, so memory stays bounded whatever the length
    of a document (a tokenizer's encoding holds a few hundred bytes per token)."""
    pieces, owners = [], []
    for owner, text in enumerate(texts):
        for piece in pieces_of(tokenizer, text):
            pieces.append(piece)
            owners.append(owner)
    blocks, counts = [], []
    for batch in _batches(pieces):
        for encoding in tokenizer.encode_batch(batch, add_special_tokens=False):
            blocks.append(np.fromiter(encoding.ids, dtype=dtype, count=len(encoding.ids)))
            counts.append(len(encoding.ids))
    lengths = np.bincount(np.array(owners, np.int64), weights=counts, minlength=len(texts)).astype(np.int64)
    flat = np.concatenate(blocks) if blocks else np.zeros(0, dtype)
    if eos_id is None:
        return flat, lengths
    return np.insert(flat, np.cumsum(lengths), dtype.type(eos_id)), lengths + 1


def _batches(texts: list[str]) -> Iterator[list[str]]:
    """Consecutive runs of `texts` of about `BATCH_CHARACTERS` characters (at least one text each)."""
    batch, size = [], 0
    for text in texts:
        if batch and size + len(text) > BATCH_CHARACTERS:
            yield batch
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    if batch:
        yield batch


PARTS = "parts"
STARTED = "started"  # in the build's directory: a marker per attempt at a unit, so repeats can be counted


def part_keys(unit: int) -> tuple[str, str, str]:
    """The keys (in the build's directory) of a part's tokens, document lengths and summary.

    >>> part_keys(3)
    ('parts/0000003.tokens.npy', 'parts/0000003.lengths.npy', 'parts/0000003.json')
    """
    stem = f"{PARTS}/{unit:07d}"
    return f"{stem}.tokens.npy", f"{stem}.lengths.npy", f"{stem}.json"


def weights_key(unit: int) -> str:
    """The key of a chat part's loss weights, written before its summary.

    >>> weights_key(3)
    'parts/0000003.weights.npy'
    """
    return f"{PARTS}/{unit:07d}.weights.npy"


def read_summaries(build_dir: Location, units: list[int]) -> list[PartSummary]:
    """The summaries of finished parts `units` (one task's share, when a resumed build finds many)."""
    directory = Directory(build_dir)
    return [PartSummary.from_json(directory.read_json(part_keys(unit)[2])) for unit in units]


def load_array(directory: Directory, key: str) -> np.ndarray:
    """A part's array (`.npy`, never pickled)."""
    data = directory.read_bytes(key)
    if data is None:
        raise InputError(f"{directory.where(key)}: a part of the build is missing; run the build again")
    return np.load(io.BytesIO(data), allow_pickle=False)


def tokenize_units(
    build_dir: Location,
    jobs: list[tuple[int, list[Piece]]],
    info: TokenizerInfo,
    policy: ReadPolicy,
    chat: ChatRecipe | None = None,
) -> list[PartSummary]:
    """Tokenize several units in one stream of `encode_batch` calls, then save each unit's part: documents,
    or with `chat` conversations (rendered by its template, each token with its loss weight).

    Batches span units, so many small units cost no more than one large one; parts are the same either way.
    """
    if chat is not None:  # Jinja and the conversation reader, only for a chat store
        from meltemi.datastore.chat.build import encode_conversations
        from meltemi.datastore.chat.conversations import read_conversations
    directory = Directory(build_dir)
    attempt = f"{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    for unit, _ in jobs:
        directory.write_text(
            f"{STARTED}/{unit:07d}.{attempt}", attempt
        )  # not empty: GCS's emulator fails on it
    tokenizer, dtype = tokenizer_of(info), token_dtype(info.vocab_size)
    notes = [ReadNotes() for _ in jobs]
    docs_per_unit = [0] * len(jobs)
    token_blocks, length_blocks, weight_blocks = [], [], []
    pending: list[str] | list[Conversation] = []
    owners: list[int] = []  # each pending item's job: a chat build may leave some out, counted per job
    pending_characters = 0

    def flush():
        if chat is None:
            tokens, lengths = encode_documents(tokenizer, pending, info.eos_id, dtype)
            token_blocks.append(tokens)
            length_blocks.append(lengths)
            for job in owners:
                docs_per_unit[job] += 1
        for job in dict.fromkeys(owners) if chat is not None else ():  # jobs in order, each its own notes
            mine = [item for item, owner in zip(pending, owners, strict=True) if owner == job]
            encoded = encode_conversations(tokenizer, mine, chat, dtype, policy, notes[job])
            token_blocks.append(encoded.tokens)
            length_blocks.append(encoded.lengths)
            weight_blocks.append(encoded.weights)
            docs_per_unit[job] += len(encoded.lengths)
        pending.clear()
        owners.clear()

    for job, (_, pieces) in enumerate(jobs):
        for piece in pieces:
            items = (
                read_documents(piece, policy, notes[job])
                if chat is None
                else read_conversations(piece, policy, notes[job], field=policy.text_field)
            )
            for item in items:
                pending.append(item)
                owners.append(job)
                pending_characters += len(item) if chat is None else 0
                if len(pending) == ENCODE_BATCH or pending_characters >= BATCH_CHARACTERS:
                    flush()
                    pending_characters = 0
    if pending:
        flush()
    tokens = np.concatenate(token_blocks) if token_blocks else np.zeros(0, dtype)
    lengths = np.concatenate(length_blocks) if length_blocks else np.zeros(0, np.int64)
    weights = np.concatenate(weight_blocks) if weight_blocks else np.zeros(0, np.uint8)
    doc_edges = np.cumsum([0, *docs_per_unit])
    token_edges = np.concatenate([[0], np.cumsum(lengths)])[doc_edges]
    _check_unchanged(jobs)
    parts = []
    for job, (unit, _) in enumerate(jobs):
        cut = slice(token_edges[job], token_edges[job + 1])
        parts.append(
            _save_part(
                directory,
                unit,
                tokens[cut],
                lengths[doc_edges[job] : doc_edges[job + 1]],
                notes[job],
                policy,
                None if chat is None else weights[cut],
            )
        )
    return parts


def _check_unchanged(jobs: list[tuple[int, list[Piece]]]) -> None:
    """Stop when an input changed since the build fingerprinted it (its stamp is not the one the plan
    recorded): its parts would mix old and new bytes. The parts done so far are kept."""
    seen = {piece.source.url: piece.source for _, pieces in jobs for piece in pieces}
    for url, source in seen.items():
        if source.stamp is not None and stamp_of(url) != source.stamp:
            raise SourceChangedError(
                f"{redact(url)}: changed while the build read it (it was {source.size:,} bytes with stamp "
                f"{source.stamp}); run the build again, which reads it anew (the parts of other inputs are "
                "kept)"
            )


def _save_part(
    build_dir: Directory,
    unit: int,
    tokens: np.ndarray,
    lengths: np.ndarray,
    notes: ReadNotes,
    policy: ReadPolicy,
    weights: np.ndarray | None = None,
) -> PartSummary:
    """Write a unit's tokens, document lengths (and a chat part's loss weights), then its summary: the
    summary marks the part done."""
    summary = PartSummary(
        unit=unit,
        documents=len(lengths),
        tokens=len(tokens),
        counts=dict(sorted(notes.counts.items())),
        invalid_utf8_files=tuple(sorted(notes.invalid_utf8_files)),
        skipped_lines=tuple(notes.skipped_lines),
        invalid_utf8=policy.invalid_utf8,
    )
    tokens_key, lengths_key, summary_key = part_keys(unit)
    arrays = [(tokens_key, tokens), (lengths_key, lengths.astype(np.uint64))]
    if weights is not None:
        arrays.append((weights_key(unit), weights.astype(np.uint8)))
    for key, array in arrays:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        build_dir.write_bytes(key, buffer.getvalue())
    build_dir.write_text(summary_key, json.dumps(summary.to_json(), sort_keys=True))
    return summary
