"""A store of any size opens reading the same few objects; stores of formats 2 and 3 read and audit alike."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from meltemi.datastore import DatastoreError, IntegrityError, TokenStore, audit_store
from meltemi.datastore.build.assembly import ArrayWriter, content_hash
from meltemi.datastore.files import CountingFiles, LocalFiles
from meltemi.datastore.layout import (
    MANIFEST,
    OFFSETS,
    OFFSETS_CHUNK,
    OFFSETS_INDEX,
    OFFSETS_SHARD,
    TOKENS,
    ShardLayout,
    array_sha256,
    crc32c,
    offsets_index_layout,
    store_arrays,
)
from meltemi.datastore.shards import ShardedArray
from meltemi.datastore.synthetic import SyntheticStore

OPENED = {MANIFEST, "tokens/zarr.json", "offsets/zarr.json", "offsets_index/zarr.json", "offsets_index/c/0"}


def counted_open(root) -> tuple[TokenStore, CountingFiles]:
    files = CountingFiles(LocalFiles(Path(root)))
    return TokenStore.open(root, files=files), files


def test_a_store_opens_reading_the_same_objects_whatever_its_size(tmp_path):
    sizes = {"small": 10**5, "huge": 10**9}
    synthetic = {name: SyntheticStore(tmp_path / name, n, 4000) for name, n in sizes.items()}
    reads = {}
    for name, made in synthetic.items():
        made.create()
        store, reads[name] = counted_open(made.root)
        assert store.num_docs == sizes[name] and store.num_tokens == 4000 * sizes[name]
    assert set(reads["small"].requests) == set(reads["huge"].requests) == OPENED
    assert reads["small"].requests == reads["huge"].requests and max(reads["huge"].requests.values()) == 1
    index = synthetic["huge"].layouts()[OFFSETS_INDEX]
    assert reads["huge"].bytes["offsets_index/c/0"] == index.num_chunks * index.chunk_bytes  # once, whole


def test_a_batch_of_a_huge_store_reads_only_the_chunks_it_needs(tmp_path):
    synthetic = SyntheticStore(tmp_path / "huge", 10**9, 4000)
    synthetic.create()
    starts = np.random.default_rng(0).integers(0, synthetic.tokens - 4096, 6)
    starts[0] = 4000 * 1024 - 100  # a window whose documents begin in two chunks of offsets
    needed = synthetic.window_chunks(starts, 4096)
    layouts = synthetic.layouts()
    for name in (TOKENS, OFFSETS):
        synthetic.write_shards(name, needed[name] // layouts[name].chunks_per_shard)
    store, files = counted_open(synthetic.root)
    files.reset()
    windows = store.read_windows(starts, 4096)
    for row, start in enumerate(starts.tolist()):
        assert np.array_equal(windows.tokens[row], synthetic.token_values(start, start + 4096))
        begins = np.arange(start // 4000 + 1, (start + 4095) // 4000 + 1) * 4000 - start
        assert windows.boundary_positions[windows.boundary_rows == row].tolist() == begins.tolist()
    for name in (TOKENS, OFFSETS):
        read = sum(n for key, n in files.requests.items() if key.startswith(f"{name}/"))
        assert read <= len(needed[name])
    per_chunk = {name: layouts[name].chunk_bytes for name in (TOKENS, OFFSETS)}
    assert files.total_bytes == sum(len(needed[name]) * per_chunk[name] for name in (TOKENS, OFFSETS))
    assert set(files.requests) <= {
        f"{name}/c/{shard}"
        for name in (TOKENS, OFFSETS)
        for shard in needed[name] // layouts[name].chunks_per_shard
    }


def rewrite_as(root: Path, version: int) -> None:
    """Make the store at `root` one of format `version`: its `offsets_index` laid out as that format lays
    it out, and each array's SHA-256 (and so the content hash) as that format computes it."""
    manifest = json.loads((root / MANIFEST).read_text())
    files, documents = LocalFiles(root), manifest["counts"]["documents"]
    values = {
        name: ShardedArray(files, name, ShardLayout.from_manifest(manifest[name]), verify=True).read_all()
        for name in store_arrays(manifest)
    }
    if version == 2:
        size = -(-(documents + 1) // OFFSETS_CHUNK)
        index = ShardLayout(size, np.dtype(np.uint64), OFFSETS_CHUNK, OFFSETS_SHARD)
    else:
        index = offsets_index_layout(documents)
    writer = ArrayWriter(root, OFFSETS_INDEX, index)
    writer.append(values[OFFSETS_INDEX])
    writer.finish()
    manifest[OFFSETS_INDEX] = index.describe()
    for name, array in values.items():
        shard = manifest[name]["shard"]
        manifest[name]["sha256"] = array_sha256(
            [array[i : i + shard] for i in range(0, len(array), shard)], version
        )
    manifest["format_version"] = version
    manifest["content_sha256"] = content_hash(
        np.dtype(manifest[TOKENS]["dtype"]), manifest[TOKENS]["sha256"], manifest[OFFSETS]["sha256"]
    )
    (root / MANIFEST).write_text(json.dumps(manifest))


@pytest.fixture
def stores(small_store, tmp_path) -> dict[int, Path]:
    """The small store as one of each format, 2 and 3."""
    copies = {}
    for version in (2, 3):
        copies[version] = Path(shutil.copytree(small_store, tmp_path / f"format{version}"))
        rewrite_as(copies[version], version)
    return copies


def test_stores_of_formats_2_and_3_read_and_audit_alike(stores):
    old, new = TokenStore.open(stores[2]), TokenStore.open(stores[3])
    assert old.manifest["format_version"] == 2 and new.manifest["format_version"] == 3
    tokens = old.tokens[:]
    assert np.array_equal(tokens, new.tokens[:]) and np.array_equal(old.offsets[:], new.offsets[:])
    starts = np.array([0, 7_999, old.num_tokens - 4097])
    for field in ("tokens", "boundary_rows", "boundary_positions"):
        assert np.array_equal(
            getattr(old.read_windows(starts, 4097), field), getattr(new.read_windows(starts, 4097), field)
        )
    stored = tokens.astype(tokens.dtype.newbyteorder("<"))
    assert audit_store(old)[TOKENS] == hashlib.sha256(stored.tobytes()).hexdigest()
    shard = new.arrays[TOKENS].layout.shard
    shards = [tokens[i : i + shard] for i in range(0, len(tokens), shard)]
    assert audit_store(new)[TOKENS] == array_sha256(shards, 3) != audit_store(old)[TOKENS]


@pytest.mark.parametrize("version", [2, 3])
def test_an_audit_catches_a_chunk_rewritten_with_its_checksum(stores, version):
    shard = stores[version] / "tokens" / "c" / "1"
    data, chunk_bytes = bytearray(shard.read_bytes()), 1000 * 2 + 4  # the small store's chunks
    at = 2 * chunk_bytes
    data[at + 10] ^= 0x20
    data[at + 2000 : at + chunk_bytes] = crc32c(bytes(data[at : at + 2000])).to_bytes(4, "little")
    shard.write_bytes(bytes(data))
    store = TokenStore.open(stores[version])
    assert len(store.tokens[10_000:11_000]) == 1000  # every chunk passes its own checksum
    with pytest.raises(IntegrityError, match="the values of 'tokens' do not match the manifest's SHA-256"):
        audit_store(store)


def test_a_format_3_manifest_with_an_offsets_index_in_many_shards_is_refused(stores):
    manifest = json.loads((stores[3] / MANIFEST).read_text())
    manifest[OFFSETS_INDEX]["shard"] = OFFSETS_SHARD
    (stores[3] / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(
        DatastoreError, match="offsets_index is laid out as .* format 3 lays it out in one shard"
    ):
        TokenStore.open(stores[3])


@pytest.mark.parametrize("version", [1, 4])
def test_other_formats_are_refused_naming_those_read(stores, version):
    manifest = json.loads((stores[3] / MANIFEST).read_text())
    (stores[3] / MANIFEST).write_text(json.dumps(manifest | {"format_version": version}))
    with pytest.raises(
        DatastoreError, match=f"token store format {version}, this library reads formats 2 and 3"
    ):
        TokenStore.open(stores[3])
