"""The suite's Hypothesis profiles (conftest.py: ``dev`` while editing, ``ci`` on CI) give a property enough
examples to find the bugs it exists for: two plausible mutations of the datastore's Feistel shuffle, each
breaking it for only some sizes, are caught by its era-shuffle property within either profile's budget.

Hypothesis's search is made deterministic here (``derandomize``) so the test cannot flake; the ``dev``
profile draws fresh examples on every run, which only adds to what it explores.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st

from meltemi.datastore import FeistelPermutation
from meltemi.datastore.feistel import _Network

_original_init = FeistelPermutation.__init__


def _tail_like_the_rest(self, n, key, window=None, rounds=6):
    """The last, shorter window shuffled as if it were whole: its indices can land past the end."""
    _original_init(self, n, key, window, rounds)
    if self._tail is not None:
        self._tail = self._full


def _one_walk(self, x, salt):
    """Cycle-walking stopped after one step: an index encrypted twice outside the range stays outside."""
    y = self._encrypt(x, salt)
    outside = np.flatnonzero(y >= np.uint64(self.size))
    y[outside] = self._encrypt(y[outside], salt[outside])
    return y


def is_an_era_shuffle(n: int, window: int, key: int) -> bool:
    """The era shuffle's property: a bijection of ``range(n)`` that keeps each index in its window."""
    image = FeistelPermutation(n, key, window=window)(np.arange(n))
    return bool(
        np.array_equal(np.sort(image), np.arange(n))
        and np.array_equal(image // window, np.arange(n) // window)
    )


@pytest.mark.parametrize("profile", ["dev", "ci"])
@pytest.mark.parametrize(
    ("owner", "method", "mutant"),
    [(FeistelPermutation, "__init__", _tail_like_the_rest), (_Network, "__call__", _one_walk)],
)
def test_the_shuffle_property_catches_a_broken_shuffle_within_the_profiles_budget(
    monkeypatch, profile, owner, method, mutant
):
    budget = settings(settings.get_profile(profile), derandomize=True, database=None)
    budget = settings(budget, suppress_health_check=list(HealthCheck))
    cases = st.tuples(st.integers(1, 3000), st.integers(1, 500), st.integers(0, 2**64 - 1))
    assert find(cases, lambda case: is_an_era_shuffle(*case), settings=budget)  # the property can hold
    monkeypatch.setattr(owner, method, mutant)
    broken = find(cases, lambda case: not is_an_era_shuffle(*case), settings=budget)
    assert not is_an_era_shuffle(*broken)
