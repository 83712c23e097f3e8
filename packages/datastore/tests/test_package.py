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


def test_the_public_api_has_examples():
    """The root pytest options run every docstring example (--doctest-modules); these must have some."""
    import doctest

    documented = {"meltemi.datastore.build.builder", "meltemi.datastore.feistel", "meltemi.datastore.loader"}
    for name in documented:
        assert doctest.DocTestFinder().find(importlib.import_module(name)), f"{name} has no example"
