"""Sharded arrays: written in any pieces, read back exactly by range and by chunk, by either reader."""

import hashlib
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.datastore.build.assembly import ArrayWriter, check_shards
from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.files import LocalFiles, TensorStoreFiles
from meltemi.datastore.layout import ShardLayout
from meltemi.datastore.shards import ShardedArray


def write(root: Path, layout: ShardLayout, values: np.ndarray, cuts: list[int]) -> str:
    writer = ArrayWriter(root, "a", layout)
    for piece in np.split(values, sorted(cuts)):
        writer.append(piece)
    digest = writer.finish()
    check_shards(root, "a", layout)
    return digest


MAX_SHARDS = 64  # a file per shard: 2,000 one-token shards took 13 CPU-seconds for one run of this property


@settings(max_examples=40)
@given(
    chunk=st.integers(1, 40),
    chunks_per_shard=st.integers(1, 6),
    dtype=st.sampled_from([np.uint16, np.uint32, np.uint64]),
    data=st.data(),
)
def test_reads_by_range_and_by_chunk_give_back_what_was_written(chunk, chunks_per_shard, dtype, data):
    size = data.draw(st.integers(1, min(2000, MAX_SHARDS * chunk * chunks_per_shard)), label="size")
    layout = ShardLayout(size, np.dtype(dtype), chunk, chunk * chunks_per_shard)
    values = np.random.default_rng(size).integers(0, np.iinfo(dtype).max, size, dtype=dtype, endpoint=True)
    cuts = data.draw(st.lists(st.integers(0, size), max_size=5))
    ranges = data.draw(
        st.lists(st.tuples(st.integers(0, size), st.integers(0, size)), min_size=1, max_size=5)
    )
    subset = np.array(
        sorted(set(data.draw(st.lists(st.integers(0, layout.num_chunks - 1), max_size=8)))), int
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        digest = write(root, layout, values, cuts)
        assert (
            digest == hashlib.sha256(values.astype(np.dtype(dtype).newbyteorder("<")).tobytes()).hexdigest()
        )
        padded = np.zeros(layout.num_chunks * chunk, dtype)
        padded[:size] = values
        expected_subset = padded.reshape(-1, chunk)[subset].reshape(-1)
        for files in (LocalFiles(root), TensorStoreFiles(root.as_uri())):
            array = ShardedArray(files, "a", layout, verify=True)
            for a, b in ranges:
                a, b = min(a, b), max(a, b)
                assert np.array_equal(array.read(a, b), values[a:b])
            assert np.array_equal(array.read_chunks(subset), expected_subset)
        assert np.array_equal(zarr.open_array(root / "a", mode="r")[:], values)
        assert len(list((root / "a" / "c").iterdir())) == layout.num_shards


def test_a_read_outside_the_array_is_an_index_error(tmp_path):
    layout = ShardLayout(10, np.dtype(np.uint16), 4, 8)
    write(tmp_path, layout, np.arange(10, dtype=np.uint16), [])
    array = ShardedArray(LocalFiles(tmp_path), "a", layout, verify=True)
    with pytest.raises(IndexError, match=r"\[5, 11\) is outside 'a' of size 10"):
        array.read(5, 11)


def test_a_shard_in_another_layout_is_refused_by_the_builder(tmp_path):
    layout = ShardLayout(10, np.dtype(np.uint16), 4, 8)
    write(tmp_path, layout, np.arange(10, dtype=np.uint16), [])
    shard = tmp_path / "a" / "c" / "0"
    shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(DatastoreError, match=r"a/c/0: TensorStore wrote shard 0 of 'a' in a layout"):
        check_shards(tmp_path, "a", layout)


def test_a_shard_must_be_a_whole_number_of_chunks():
    with pytest.raises(ValueError, match=r"a shard \(10\) must be a positive multiple of the chunk \(4\)"):
        ShardLayout(100, np.dtype(np.uint16), 4, 10)


def test_local_reads_keep_at_most_max_open_descriptors_and_stay_right_across_threads(tmp_path):
    import threading

    layout = ShardLayout(5000, np.dtype(np.uint32), 10, 50)
    values = np.arange(5000, dtype=np.uint32)
    write(tmp_path, layout, values, [])
    files = LocalFiles(tmp_path, max_open=3)
    array = ShardedArray(files, "a", layout, verify=True)
    failures = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(200):
            a = int(rng.integers(0, 4900))
            if not np.array_equal(array.read(a, a + 100), values[a : a + 100]):
                failures.append(a)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and files.open_descriptors <= 3
    with pytest.raises(ValueError, match="max_open must be at least 1"):
        LocalFiles(tmp_path, max_open=0)
