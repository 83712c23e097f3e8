"""The README's example runs as written, and the loss it prints falls."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).parents[1] / "README.md"


def test_readme_example_trains_and_the_held_out_loss_falls(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(blocks[0], str(README), "exec"), {})
    first, arrow, last, plot = printed.getvalue().split()
    assert arrow == "->" and float(last) < float(first) - 0.5 and plot.endswith("loss.png")
