"""A token store of any size, made up, for measuring what opening and reading a store cost.

Every document is `tokens_per_document` tokens long, so `offsets` is an arithmetic progression, and token
`p` is `p % vocab_size`. The store is real where opening reads it: `manifest.json` (format 3), the group's
and each array's `zarr.json`, and `offsets_index` (its one shard, written through `ArrayWriter`). The
shards of `tokens` and `offsets` are virtual: none exists until `write_shards` writes it, through
TensorStore, with the values the progression gives (the bytes a build of those values writes), so a store
of 12 trillion tokens takes 23 MB of disk plus the shards a measurement reads; reading any other shard is
an error naming it. The manifest's SHA-256s are those of the arrays' values, but for the virtual arrays
(no one reads 48 TB to compute them): their entries have none, and `content_sha256` names the progression.
"""

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorstore as ts

from meltemi.datastore.build.assembly import ArrayWriter
from meltemi.datastore.layout import (
    DEFAULT_CHUNK_TOKENS,
    DEFAULT_SHARD_TOKENS,
    FORMAT_VERSION,
    GROUP,
    MANIFEST,
    OFFSETS,
    OFFSETS_CHUNK,
    OFFSETS_INDEX,
    OFFSETS_SHARD,
    TEXT,
    TOKENS,
    ShardLayout,
    array_sha256,
    create_array,
    group_metadata,
    offsets_index_layout,
    token_dtype,
)
from meltemi.datastore.storage import Directory, storage_context


@dataclass(frozen=True)
class SyntheticStore:
    """A made-up store of `documents` documents of `tokens_per_document` tokens each, at `root`.

    >>> import tempfile
    >>> from meltemi.datastore import TokenStore
    >>> synthetic = SyntheticStore(tempfile.mkdtemp(), documents=10**9, tokens_per_document=4000)
    >>> synthetic.create()
    >>> synthetic.write_shards(TOKENS, [synthetic.layouts()[TOKENS].num_shards - 1])
    >>> store, end = TokenStore.open(synthetic.root), synthetic.tokens
    >>> end, store.tokens[end - 3 :].tolist() == synthetic.token_values(end - 3, end).tolist()
    (4000000000000, True)
    """

    root: str | os.PathLike
    documents: int
    tokens_per_document: int
    vocab_size: int = 128_256

    @property
    def tokens(self) -> int:
        return self.documents * self.tokens_per_document

    def layouts(self) -> dict[str, ShardLayout]:
        """Each array's layout: a build's defaults for the store's counts."""
        return {
            TOKENS: ShardLayout(
                self.tokens, token_dtype(self.vocab_size), DEFAULT_CHUNK_TOKENS, DEFAULT_SHARD_TOKENS
            ),
            OFFSETS: ShardLayout(self.documents + 1, np.dtype(np.uint64), OFFSETS_CHUNK, OFFSETS_SHARD),
            OFFSETS_INDEX: offsets_index_layout(self.documents),
        }

    def token_values(self, start: int, stop: int) -> np.ndarray:
        """Tokens `[start, stop)`."""
        return (np.arange(start, stop, dtype=np.uint64) % self.vocab_size).astype(
            token_dtype(self.vocab_size)
        )

    def offset_values(self, start: int, stop: int) -> np.ndarray:
        """Offsets `[start, stop)`: where documents `start..stop - 1` begin (`documents`'s: the end)."""
        return np.arange(start, stop, dtype=np.uint64) * np.uint64(self.tokens_per_document)

    def create(self) -> None:
        """Write the store but the shards of `tokens` and `offsets`: the metadata, `offsets_index`, and the
        manifest last."""
        out, layouts = Directory(self.root), self.layouts()
        for name in (TOKENS, OFFSETS):
            create_array(out, name, layouts[name])
        index = self.offset_values(0, layouts[OFFSETS_INDEX].size) * np.uint64(OFFSETS_CHUNK)
        writer = ArrayWriter(out, OFFSETS_INDEX, layouts[OFFSETS_INDEX])
        writer.append(index)
        writer.finish()
        out.write_json(GROUP, group_metadata())
        out.write_json(MANIFEST, self.manifest(array_sha256([index], FORMAT_VERSION)))

    def manifest(self, index_sha256: str) -> dict[str, Any]:
        """The store's manifest, `offsets_index`'s SHA-256 given."""
        layouts = self.layouts()
        named = f"synthetic:{self.documents}:{self.tokens_per_document}:{self.vocab_size}"
        return {
            "format_version": FORMAT_VERSION,
            "format": TEXT,
            "tokenizer": {"name": "synthetic", "sha256": "0" * 64, "vocab_size": self.vocab_size},
            "sources": [],
            "counts": {"documents": self.documents, "tokens": self.tokens},
            TOKENS: layouts[TOKENS].describe(),
            OFFSETS: layouts[OFFSETS].describe(),
            OFFSETS_INDEX: layouts[OFFSETS_INDEX].describe() | {"sha256": index_sha256},
            "content_sha256": hashlib.sha256(named.encode()).hexdigest(),
        }

    def window_chunks(self, starts: np.ndarray, length: int) -> dict[str, np.ndarray]:
        """The chunks of `tokens` and of `offsets` that token windows `[s, s + length)` for `s` in `starts`
        need, from the progression: the tokens' own, and those holding where the documents they overlap
        begin.

        >>> SyntheticStore("/tmp/x", 10**6, 4000).window_chunks(np.array([4_095_000]), 2048)
        {'tokens': array([3999, 4000, 4001]), 'offsets': array([0, 1])}
        """
        starts = np.asarray(starts, np.int64)
        chunk, per_document = self.layouts()[TOKENS].chunk, self.tokens_per_document
        tokens = [np.arange(s // chunk, (s + length - 1) // chunk + 1) for s in starts.tolist()]
        documents = [
            np.arange(s // per_document, (s + length - 1) // per_document + 1) for s in starts.tolist()
        ]
        return {
            TOKENS: np.unique(np.concatenate(tokens)),
            OFFSETS: np.unique(np.concatenate(documents) // OFFSETS_CHUNK),
        }

    def write_shards(self, name: str, shards: Iterable[int]) -> None:
        """Write shards of `tokens` or `offsets`, whole, with the progression's values."""
        layout = self.layouts()[name]
        values = self.token_values if name == TOKENS else self.offset_values
        spec = Directory(self.root).array_spec(name) | {"open": True, "store_data_equal_to_fill_value": True}
        array = ts.open(spec, context=storage_context()).result()
        for shard in sorted(set(shards)):
            start = shard * layout.shard
            stop = min(layout.size, start + layout.shard)
            array[start:stop].write(values(start, stop)).result()
