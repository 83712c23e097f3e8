"""The README example runs as written, and every docstring example in the package holds."""

import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest

import meltemi.kernels

README = pathlib.Path(__file__).parents[1] / "README.md"
MODULES = sorted(m.name for m in pkgutil.iter_modules(meltemi.kernels.__path__, "meltemi.kernels."))


def test_readme_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "(2, 48, 8, 32)" in printed and "(96,) (96, 32)" in printed


@pytest.mark.parametrize("name", ["meltemi.kernels", *MODULES])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
