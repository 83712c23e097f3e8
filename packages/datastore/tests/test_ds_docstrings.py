"""The examples in the public docstrings run and print what they say."""

import doctest
import importlib
import pkgutil

import pytest

import meltemi.datastore

MODULES = sorted(m.name for m in pkgutil.iter_modules(meltemi.datastore.__path__, "meltemi.datastore."))


@pytest.mark.parametrize("name", [m for m in MODULES if not m.endswith("__main__")])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_the_public_api_has_examples():
    documented = [n for n in MODULES if doctest.DocTestFinder().find(importlib.import_module(n))]
    assert {"meltemi.datastore.build", "meltemi.datastore.feistel", "meltemi.datastore.loader"} <= set(
        documented
    )
