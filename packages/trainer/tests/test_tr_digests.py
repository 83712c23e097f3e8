"""Array fingerprints: computed by XLA on sharded arrays or by NumPy on the host, they equal a plain NumPy
statement of the definition on every mesh, and a changed, swapped or moved element changes them."""

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding, PartitionSpec

from meltemi.trainer.checkpoint import digests
from meltemi.trainer.checkpoint.digests import describe, device_sums, fingerprints, host_sums


def reference(array: np.ndarray) -> str:
    """The definition, element by element in NumPy: two sums mod 2**32 of MurmurHash3's finaliser of the
    element's bits xor the finaliser of its row-major position times a lane constant plus that constant."""

    def mix(h):
        h = h ^ (h >> np.uint32(16))
        h = h * np.uint32(0x85EBCA6B)
        h = h ^ (h >> np.uint32(13))
        h = h * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))

    flat = np.ascontiguousarray(array).reshape(-1)
    words = flat.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[flat.dtype.itemsize]).astype(np.uint32)
    positions = np.arange(flat.size, dtype=np.uint32)
    with np.errstate(over="ignore"):
        sums = [
            int(mix(words ^ mix(positions * np.uint32(m) + np.uint32(m))).sum(dtype=np.uint64) % 2**32)
            for m in (0x9E3779B9, 0x85EBCA77)
        ]
    return f"{sums[0]:08x}{sums[1]:08x}"


DTYPES = [np.float32, np.int32, np.uint8, np.int16, jax.numpy.bfloat16]
MESHES = [(8, 1), (4, 2), (2, 4), (1, 8), (1, 1)]


@settings(deadline=None)
@given(
    rows=st.sampled_from([8, 16, 24]),
    cols=st.sampled_from([8, 16, 40]),
    dtype=st.sampled_from(DTYPES),
    mesh_shape=st.sampled_from(MESHES),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_sharded_arrays_fingerprint_is_the_definitions_on_every_mesh(rows, cols, dtype, mesh_shape, seed):
    values = (np.random.default_rng(seed).normal(size=(rows, cols)) * 50).astype(dtype)
    mesh = jax.make_mesh(mesh_shape, ("a", "b"), devices=jax.devices()[: mesh_shape[0] * mesh_shape[1]])
    sharded = jax.device_put(values, NamedSharding(mesh, PartitionSpec("a", "b")))
    (on_devices,) = device_sums([sharded])
    assert describe(on_devices) == reference(values)
    assert fingerprints([sharded]) == fingerprints([values]) == [reference(values)]  # small: on the host


@given(
    shape=st.sampled_from([(), (1,), (7,), (3, 5), (2, 3, 4)]),
    dtype=st.sampled_from([*DTYPES, np.bool_, jax.numpy.float8_e4m3fn, np.uint16]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_hosts_sums_are_the_devices_bit_for_bit(shape, dtype, seed):
    values = (np.random.default_rng(seed).normal(size=shape) * 50).astype(dtype)
    assert np.array_equal(host_sums(values), np.asarray(digests.array_sums(values)))
    assert describe(host_sums(values)) == reference(values)


def test_large_arrays_are_summed_on_the_devices_and_each_sum_stays_in_its_place(monkeypatch):
    arrays = [np.arange(n, dtype=np.float32) for n in (3, 40, 5, 64, 2)]
    monkeypatch.setattr(digests, "HOST_ELEMENTS", 8)
    assert [digests.on_host(x) for x in arrays] == [True, False, True, False, True]
    sums = digests.fingerprint_sums(arrays)
    assert [isinstance(s, jax.Array) for s in sums] == [False, True, False, True, False]
    assert [describe(s) for s in sums] == [reference(x) for x in arrays]


@given(
    values=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=64, unique=True),
    data=st.data(),
)
def test_a_changed_or_swapped_element_changes_the_fingerprint(values, data):
    array = np.array(values, np.int64).astype(np.uint32)
    i = data.draw(st.integers(0, len(values) - 1))
    j = data.draw(st.integers(0, len(values) - 1).filter(lambda k: k != i))
    changed, swapped = array.copy(), array.copy()
    changed[i] ^= np.uint32(1 << data.draw(st.integers(0, 31)))
    swapped[[i, j]] = swapped[[j, i]]
    original, *others = fingerprints([array, changed, swapped, array.reshape(1, -1)])
    assert original not in others[:2]
    assert others[2] == original  # a reshape keeps each element's row-major position


def test_several_arrays_at_once_are_each_their_own_and_eight_byte_elements_are_refused():
    a, b = np.arange(6, dtype=np.float32), np.ones((2, 3), np.int8)
    assert fingerprints([a, b]) == [reference(a), reference(b)]
    with pytest.raises(ValueError, match="elements of 8 bytes"):
        fingerprints([np.zeros(2, np.complex64)])
