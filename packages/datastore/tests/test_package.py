"""The installed distribution and the import package agree on who they are."""

import importlib
import importlib.metadata


def test_version_matches_distribution_metadata():
    module = importlib.import_module("meltemi.datastore")
    assert module.__version__ == importlib.metadata.version("meltemi-datastore")


def test_import_does_not_load_jax():
    import subprocess
    import sys

    probe = "import sys, meltemi.datastore; print('jax' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False", result.stderr


def test_the_package_and_its_errors_import_without_the_build_stack():
    """A PyTorch user's ``import meltemi.datastore`` and an app's error path load none of what building a
    store needs until a name that needs it is used."""
    import subprocess
    import sys

    probe = (
        "import sys, meltemi.datastore, meltemi.datastore.errors;"
        "heavy = {'tokenizers', 'pyarrow', 'tensorstore', 'numpy', 'meltemi.datastore.build'};"
        "print(sorted(heavy & set(sys.modules)));"
        "meltemi.datastore.TokenStore;"
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    unused, used = result.stdout.splitlines()
    assert unused == "[]", result.stdout
    assert "tensorstore" in used and "numpy" in used  # the store's own modules load when it is used


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error():
    import types

    import pytest

    module = importlib.import_module("meltemi.datastore")
    for name in module.__all__:
        value = getattr(module, name)
        assert (
            (value.__name__ == f"meltemi.datastore.{name}")
            if isinstance(value, types.ModuleType)
            else (value.__name__ == name)
        ), name
    with pytest.raises(AttributeError, match="no attribute 'TokenStor'"):
        module.TokenStor  # noqa: B018


def test_the_public_api_has_examples():
    """The root pytest options run every docstring example (--doctest-modules); these must have some."""
    import doctest

    documented = {"meltemi.datastore.build.builder", "meltemi.datastore.feistel", "meltemi.datastore.loader"}
    for name in documented:
        assert doctest.DocTestFinder().find(importlib.import_module(name)), f"{name} has no example"
