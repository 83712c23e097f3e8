"""The installed distribution and the import package agree on who they are."""

import importlib
import importlib.metadata


def test_version_matches_distribution_metadata():
    module = importlib.import_module("meltemi.kernels")
    assert module.__version__ == importlib.metadata.version("meltemi-kernels")
