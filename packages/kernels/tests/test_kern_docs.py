"""The README example runs as written (the root pytest options run the docstring examples)."""

import pathlib
import re

README = pathlib.Path(__file__).parents[1] / "README.md"


def test_readme_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(README), "exec"), {})
    printed = capsys.readouterr().out
    assert "(2, 48, 8, 32)" in printed and "(96,) (96, 32)" in printed
