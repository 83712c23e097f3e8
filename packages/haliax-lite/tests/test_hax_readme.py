"""The README's example runs as written and prints what its comment says."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).parents[1] / "README.md"


def test_readme_example_runs_and_prints_the_promised_result():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    code = blocks[0]
    assert len([line for line in code.splitlines() if line.strip()]) <= 12
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    promised = re.search(r"# (.*)$", code.strip().splitlines()[-1]).group(1)
    assert printed.getvalue().strip() == promised
