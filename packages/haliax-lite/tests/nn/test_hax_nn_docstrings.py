"""The runnable examples in ``haliax_lite.nn``'s docstrings run as written and print what they show."""

import doctest
import importlib

import pytest

MODULES_WITH_EXAMPLES = [
    "haliax_lite.nn",
    "haliax_lite.nn.activations",
    "haliax_lite.nn.attention",
    "haliax_lite.nn.dropout",
    "haliax_lite.nn.embedding",
    "haliax_lite.nn.linear",
    "haliax_lite.nn.loss",
    "haliax_lite.nn.pooling",
    "haliax_lite.nn.mlp",
    "haliax_lite.nn.normalization",
    "haliax_lite.nn.scan",
]


@pytest.mark.parametrize("name", MODULES_WITH_EXAMPLES)
def test_docstring_examples_run_as_written(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
