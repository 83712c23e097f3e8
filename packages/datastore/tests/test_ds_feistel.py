"""FeistelPermutation: a keyed bijection, window-preserving era shuffles, and per-index evaluation."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.datastore import FeistelPermutation

keys = st.integers(min_value=0, max_value=2**64 - 1)


@given(n=st.integers(1, 3000), key=keys)
def test_is_a_bijection_on_range_n(n, key):
    image = FeistelPermutation(n, key)(np.arange(n))
    assert np.array_equal(np.sort(image), np.arange(n))


@given(n=st.integers(1, 3000), window=st.integers(1, 500), key=keys)
def test_era_shuffle_is_a_bijection_that_stays_in_its_window(n, window, key):
    image = FeistelPermutation(n, key, window=window)(np.arange(n))
    assert np.array_equal(np.sort(image), np.arange(n))
    assert np.array_equal(image // window, np.arange(n) // window)


@given(n=st.integers(2, 10**12), key=keys, data=st.data())
def test_each_index_is_computed_alone(n, key, data):
    indices = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    perm = FeistelPermutation(n, key)
    together = perm(indices)
    assert np.array_equal(together, [perm(np.array([i]))[0] for i in indices])
    assert together.min() >= 0 and together.max() < n
    assert len(set(together.tolist())) == len(set(indices.tolist()))


def test_different_keys_give_different_orders():
    a, b = FeistelPermutation(1000, 1)(np.arange(1000)), FeistelPermutation(1000, 2)(np.arange(1000))
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, np.arange(1000))


def test_keeps_the_shape_of_its_input():
    assert FeistelPermutation(50, 3)(np.arange(12).reshape(3, 4)).shape == (3, 4)


@pytest.mark.parametrize("bad", [0, -1, 2**62 + 1])
def test_rejects_an_empty_or_huge_domain(bad):
    with pytest.raises(ValueError, match="n="):
        FeistelPermutation(bad, 0)


def test_rejects_out_of_range_indices():
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        FeistelPermutation(5, 0)(np.array([5]))
