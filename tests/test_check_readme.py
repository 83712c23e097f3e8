"""scripts/check_readme.py reads every figure it checks from the README (none is missing there), and calls
each one printed ok, different, machine-dependent or, between two runs, not reproducible. The commands
themselves are not run here (minutes each): the script is run by hand, its output in the report."""

import runpy
from pathlib import Path

from meltemi.datastore import BuildReport

ROOT = Path(__file__).parents[1]
SCRIPT = runpy.run_path(str(ROOT / "scripts" / "check_readme.py"))


def _printed(figures: dict[str, str]) -> dict[str, str]:
    """What the commands would print for these figures (the summary lines, as the apps print them)."""
    built = BuildReport(
        ".cache/meltemi/stdlib", 665, 2_812_345, seconds=4.1
    ).summary()  # as the datastore says it
    first = (
        f"{built}\n"
        f"compiled the train step in 3.1 s; per device: ...\n"
        f"step 240/240  loss {figures['loss240']}  4.8k tok/s\n"
        "steps: 240   tokens: 983,040   4,700 tokens/s\n"
        f"held-out loss: 9.031 at step 0 -> {figures['held240']} at step 240\ntook 230.0 s\n"
    )
    sft = (
        f"{BuildReport('.cache/meltemi/chat', 4_157, 500_000, seconds=2.0, format='chat').summary()}\n"
        "stdlib_chat: 3,949 conversations in 697 rows of 513 tokens, 97.1% filled; 120 steps of 8 rows read "
        "960 of them: 1.38 epochs\n"
        f"held-out assistant loss: 7.186 at step 0 -> {figures['chat120']} at step 120\n"
        "reply (greedy) to '...':\n"
        "  before: def __init__(self,\n              def __init__(self,\n"
        f"  after:  Function: {figures['word']}\n          Parameters: none\n"
        "          Returns: yes\ntook 150.2 s\n"
    )
    return {"first": first, "sft": sft}


def test_every_figure_is_found_in_the_readme_and_judged():
    readme = (ROOT / "README.md").read_text()
    compare = SCRIPT["compare"]
    as_shown = {"loss240": "4.3141", "held240": "4.481", "chat120": "1.726", "word": "is"}
    lines = compare(readme, [_printed(as_shown)])
    verdicts = {line.split(":")[0]: verdict for verdict, line in lines}
    assert set(verdicts.values()) == {"ok", "machine"}, lines
    assert verdicts["the first run in all"] == "machine" and verdicts["held-out loss at step 240"] == "ok"
    stale = compare(readme, [_printed(as_shown | {"chat120": "1.742", "word": "get"})])
    assert [line for verdict, line in stale if verdict == "different"] == [
        "held-out assistant loss at step 120: README '1.726', printed '1.742': different",
        "reply after: README 'Function: is / Parameters: none / Returns: yes', printed 'Function: get / "
        "Parameters: none / Returns: yes': different",
    ]
    twice = compare(readme, [_printed(as_shown), _printed(as_shown | {"held240": "4.482"})])
    assert [line.split(":")[0] for verdict, line in twice if verdict == "not reproducible"] == [
        "held-out loss at step 240"
    ]
    for figure in SCRIPT["FIGURES"]:  # the rehearsal's too: each is where the script looks for it
        assert figure.find(readme, figure.readme) is not None, figure.name
