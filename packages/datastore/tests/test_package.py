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
