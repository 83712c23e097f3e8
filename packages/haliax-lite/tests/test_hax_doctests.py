"""The runnable examples in the core's docstrings stay true."""

import doctest
import importlib

import pytest

MODULES = (
    "haliax_lite axis core broadcast creation dot einsum einops_syntax elementwise reductions ops shape_ops "
    "indexing random hof checkpoint partitioning tree_util unary binary array_ops fourier unique_bits"
).split()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name if name == "haliax_lite" else f"haliax_lite.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0, f"{result.failed} docstring examples of {name} fail; run doctest on it to see"
