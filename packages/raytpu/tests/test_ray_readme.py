"""The README's example runs as written and prints what it says it prints."""

import contextlib
import io
import re
from pathlib import Path

import pytest

# Under `--dist loadgroup` this shares a worker with the cluster tests, so two clusters never overlap.
pytestmark = pytest.mark.xdist_group("raytpu-cluster")

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_example_runs_and_prints_its_promised_output():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the README should have exactly one python example"
    code = blocks[0]
    promised = re.search(r"print\(results\)  # (.*)", code).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    assert printed.getvalue().strip() == promised
