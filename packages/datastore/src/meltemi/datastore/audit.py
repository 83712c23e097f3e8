"""Check a whole store against its manifest: every chunk's CRC-32C, the values' SHA-256s, the offsets.

Reads check only the chunks they touch; this reads everything, shard by shard, so it also catches what a
per-chunk checksum cannot: a chunk rewritten together with its checksum, or a shard copied in from another
store. Each array's SHA-256 is the store's format's (`layout.array_sha256`): over all the values (format 2)
or composed of its blocks' (format 3), computed a shard at a time, so memory holds one shard.
"""

from collections.abc import Iterator

import numpy as np

from meltemi.datastore.errors import IntegrityError
from meltemi.datastore.layout import array_sha256
from meltemi.datastore.shards import ShardedArray
from meltemi.datastore.store import TokenStore


def audit_store(store: TokenStore) -> dict[str, str]:
    """Read all of `store`, checking every checksum and hash; return each array's SHA-256.

    Raises `IntegrityError` naming the array (and for a bad chunk, its file and chunk) on any difference.

    >>> import tempfile
    >>> from meltemi.datastore import build_store, corpora
    >>> tmp = tempfile.mkdtemp()
    >>> files = corpora.python_stdlib()[:5]
    >>> tok = corpora.train_tokenizer(files, 300, f"{tmp}/tokenizer.json")
    >>> _ = build_store(files, tok, f"{tmp}/store", progress=False)
    >>> sorted(audit_store(TokenStore.open(f"{tmp}/store")))
    ['offsets', 'offsets_index', 'tokens']
    """
    digests = {}
    for name, array in store.arrays.items():
        checked = ShardedArray(array.files, array.name, array.layout, verify=True)
        digests[name] = recorded_sha256(checked, store.manifest["format_version"])
        expected = store.manifest[name].get("sha256")
        if digests[name] != expected:
            raise IntegrityError(
                f"{store.path}: the values of {name!r} do not match the manifest's SHA-256 "
                f"({digests[name][:16]}..., manifest {str(expected)[:16]}...); every chunk passed its own "
                "checksum, so chunks were rewritten or copied from another store"
            )
    return digests


def recorded_sha256(array: ShardedArray, format_version: int) -> str:
    """`layout.array_sha256` of the array's values as a store of `format_version` records it, read and
    streamed a shard at a time.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from meltemi.datastore import layout
    >>> from meltemi.datastore.files import LocalFiles
    >>> from meltemi.datastore.build.assembly import ArrayWriter
    >>> root, shape = Path(tempfile.mkdtemp()), layout.ShardLayout(10, np.dtype(np.uint16), chunk=2, shard=4)
    >>> writer = ArrayWriter(root, "a", shape)
    >>> writer.append(np.arange(10, dtype=np.uint16))
    >>> _ = writer.finish()
    >>> array = ShardedArray(LocalFiles(root), "a", shape, verify=True)
    >>> parts = [np.arange(0, 4), np.arange(4, 8), np.arange(8, 10)]
    >>> recorded_sha256(array, 3) == layout.array_sha256([p.astype(np.uint16) for p in parts], 3)
    True
    """
    return array_sha256(_shards(array), format_version)


def _shards(array: ShardedArray) -> Iterator[np.ndarray]:
    """The array's values, one shard at a time (the last trimmed to the array's size)."""
    layout = array.layout
    for shard in range(layout.num_shards):
        first = shard * layout.chunks_per_shard
        chunks = np.arange(first, first + layout.chunks_in_shard(shard))
        values = array.read_chunks(chunks)
        yield values[: max(0, layout.size - first * layout.chunk)]
