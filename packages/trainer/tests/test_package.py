"""The installed distribution and the import package agree on who they are."""

import importlib
import importlib.metadata


def test_version_matches_distribution_metadata():
    module = importlib.import_module("meltemi.trainer")
    assert module.__version__ == importlib.metadata.version("meltemi-trainer")


def test_the_package_the_cli_and_its_errors_import_without_jax():
    """``--help`` and the error paths start fast: nothing heavy loads until a run needs it."""
    import subprocess
    import sys

    probe = (
        "import sys, meltemi.trainer, meltemi.trainer.errors, meltemi.trainer.cli;"
        "heavy = sorted({'jax', 'optax', 'equinox', 'haliax_lite', 'tensorstore'} & set(sys.modules));"
        "print(heavy)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_public_name_resolves_and_an_unknown_one_is_an_attribute_error():
    import pytest

    module = importlib.import_module("meltemi.trainer")
    for name in module.__all__:
        assert getattr(module, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Trainr'"):
        module.Trainr  # noqa: B018
