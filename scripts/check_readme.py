"""Rerun the README's commands and check every figure the README shows against what they print.

    uv run scripts/check_readme.py                      # the first run, its fine-tuning, the Marin rehearsal
    uv run scripts/check_readme.py --only first,sft     # some of them (first: apps/pretrain.py; sft; marin)
    uv run scripts/check_readme.py --twice              # each command twice, in two fresh directories

The commands run as a fresh clone runs them: in a new temporary directory (so nothing cached under
``.cache/meltemi`` or ``runs/`` is reused; JAX's compilation cache under ``~/.cache`` is, which changes no
number), with this checkout's apps and configs. Each figure is read from the README's text and from the
command's output by the same pattern, then printed with ``ok`` or ``different``; a figure that depends on the
machine (a duration, a speed) is printed with ``machine`` instead, since the README says where and when it
was measured, and never fails the check. With ``--twice`` a figure that differs between the two runs is
``not reproducible``: a bug of the determinism contract, not a stale README. Exit status 1 when a figure
differs or is missing from either side. The first run and its fine-tuning take about 3 minutes each on 2
cores, the rehearsal about 6.

>>> [figure.name for figure in FIGURES if figure.command == "sft"][:2]
['held-out assistant loss at step 0', 'held-out assistant loss at step 120']
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMANDS = {  # the README's commands, in the order they run (sft starts from first's runs/tiny)
    "first": ["apps/pretrain.py"],
    "sft": ["apps/sft.py"],
    "marin": ["--group", "eval", "apps/pretrain.py", "--config", "configs/tiny_marin.yaml"],
    "marin_sft": ["apps/sft.py", "--base", "runs/tiny_marin", "--run-dir", "runs/tiny_marin_sft"],
}
GROUPS = {"first": ["first"], "sft": ["first", "sft"], "marin": ["marin", "marin_sft"]}


@dataclasses.dataclass(frozen=True)
class Figure:
    """A figure the README shows: its name, the command that prints it, the pattern that finds it in the
    README (``readme``) and in the command's output (``printed``; the same one when None), and whether it
    depends on the machine (``machine``: a duration or a speed). ``value`` turns a match into the figure."""

    name: str
    command: str
    readme: str
    printed: str | None = None
    machine: bool = False
    value: Callable[[re.Match], str] = lambda match: match.group(1)

    def find(self, text: str, pattern: str) -> str | None:
        match = re.search(pattern, text, re.MULTILINE)
        return None if match is None else self.value(match)


def _minutes(match: re.Match) -> str:
    return f"{int(match.group(1))} min {int(match.group(2))} s"


def _seconds(match: re.Match) -> str:
    total = float(match.group(1))
    return f"{int(total // 60)} min {round(total % 60)} s"


def _reply(match: re.Match) -> str:
    """A reply as the summary prints it: its lines, indentation aside."""
    return " / ".join(line.strip() for line in match.group(1).splitlines() if line.strip())


_LOSS = r"held-out loss: ([\d.]+) at step 0 -> ([\d.]+) at step 240"
_CHAT_LOSS = r"held-out assistant loss: ([\d.]+) at step 0 -> ([\d.]+) at step 120"
_PACKING = (  # the README wraps it: any space may be a line break
    r"([\d,]+ conversations in [\d,]+ rows of \d+ tokens, [\d.]+% filled; \d+ steps of \d+ rows read "
    r"[\d,]+ of them: [\d.]+ epochs)"
).replace(" ", r"\s+")
_REPLY = r"^  {kind}: +(.+(?:\n {{10,}}\S.*)*)"  # a reply's first line, then its indented lines
FIGURES = (
    Figure("held-out loss at step 0", "first", _LOSS),
    Figure("held-out loss at step 240", "first", _LOSS, value=lambda m: m.group(2)),
    Figure(
        "steps and tokens", "first", r"^(steps: \d+ +tokens: [\d,]+)", value=lambda m: " ".join(m[1].split())
    ),
    Figure("loss at step 240 (the progress line)", "first", r"step 240/240 .*?loss ([\d.]+)"),
    Figure(
        "the standard library's files and tokens",
        "first",
        r"\(([\d,]+) files, ([\d.]+)M tokens:\s+the\s+library",
        r"built ([\d,]+) docs, ([\d,]+) tokens[^\n]*?(?:, (\d+) empty files?)?$",  # a file: a doc, or empty
        value=lambda m: (
            f"{int(m[1].replace(',', '')) + int(m[3] or 0) if m.lastindex == 3 else m[1]} files, "
            f"{float(m[2].replace(',', '')) / (1e6 if ',' in m[2] else 1):.1f}M tokens"
        ),
    ),
    Figure("compilation of the train step", "first", r"compiled the train step in ([\d.]+) s", machine=True),
    Figure("tokens per second", "first", r"tokens: [\d,]+ +([\d,]+) tokens/s", machine=True),
    Figure(
        "the first run in all",
        "first",
        r"\*\*(\d+) min (\d+) s\*\* in all, the 240 steps",
        r"^took ([\d.]+) s$",
        machine=True,
        value=_minutes,
    ),
    Figure("held-out assistant loss at step 0", "sft", _CHAT_LOSS),
    Figure("held-out assistant loss at step 120", "sft", _CHAT_LOSS, value=lambda m: m.group(2)),
    Figure(
        "reply before (its first line)",
        "sft",
        _REPLY.format(kind="before"),
        value=lambda m: _reply(m).split(" / ")[0],
    ),
    Figure("reply after", "sft", _REPLY.format(kind="after"), value=_reply),
    Figure("packing", "sft", r"`" + _PACKING + r"`", _PACKING, value=lambda m: " ".join(m[1].split())),
    Figure(
        "stdlib-chat conversations (about)",
        "sft",
        r"\(`stdlib-chat`: about ([\d,]+) of them",
        r"built ([\d,]+) conversations",
        value=lambda m: f"{round(int(m[1].replace(',', '')), -2):,}",
    ),
    Figure(
        "the fine-tuning in all",
        "sft",
        r"\*\*(\d+) min (\d+) s\*\* in all, the held-out assistant loss",
        r"^took ([\d.]+) s$",
        machine=True,
        value=_minutes,
    ),
    Figure(
        "rehearsal held-out loss",
        "marin",
        r"tiny_marin\.yaml +# held-out loss ([\d.]+ -> [\d.]+); EMA weights: ([\d.]+)",
        r"held-out loss: ([\d.]+) at step 0 -> ([\d.]+) at step \d+; EMA weights: ([\d.]+)",
        value=lambda m: f"{m[1]} -> {m[2]}; EMA {m[3]}" if m.lastindex == 3 else f"{m[1]}; EMA {m[2]}",
    ),
    Figure(
        "rehearsal fine-tuning held-out assistant loss",
        "marin_sft",
        r"--base runs/tiny_marin --run-dir runs/tiny_marin_sft +# held-out assistant loss ([\d.]+ -> [\d.]+)",
        r"held-out assistant loss: ([\d.]+) at step 0 -> ([\d.]+) at step \d+",
        value=lambda m: m[1] if m.lastindex == 1 else f"{m[1]} -> {m[2]}",
    ),
    Figure(
        "rehearsal in all (pretraining)",
        "marin",
        r"in about 6 minutes on 2 cores \((\d+)m(\d+)s and",
        r"^took ([\d.]+) s$",
        machine=True,
        value=_minutes,
    ),
    Figure(
        "rehearsal in all (fine-tuning)",
        "marin_sft",
        r"in about 6 minutes on 2 cores \(\d+m\d+s and (\d+)m(\d+)s\)",
        r"^took ([\d.]+) s$",
        machine=True,
        value=_minutes,
    ),
)
_PRINTED_VALUE = {r"^took ([\d.]+) s$": _seconds}  # a duration this script prints, in seconds


def run_commands(names: list[str], where: Path) -> dict[str, str]:
    """Run the README's commands ``names`` in ``where`` (a fresh directory), as ``uv run`` at the
    repository's root runs them; each command's output (stdout, stderr and how long it took)."""
    outputs = {}
    env = {key: value for key, value in os.environ.items() if not key.startswith("MELTEMI_")}
    for name in names:
        args = COMMANDS[name]
        uv = ["uv", "run", "--project", str(ROOT)]
        if args[0] == "--group":
            uv += args[:2]
            args = args[2:]
        resolved = [str(ROOT / arg) if arg.startswith(("apps/", "configs/")) else arg for arg in args]
        print(f"running {' '.join(COMMANDS[name])} in {where}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        done = subprocess.run([*uv, "python", *resolved], cwd=where, env=env, capture_output=True, text=True)
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(COMMANDS[name])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        outputs[name] = f"{done.stdout}\n{done.stderr}\ntook {took:.1f} s\n"
    return outputs


def printed_value(figure: Figure, output: str) -> str | None:
    """The figure as the command printed it."""
    pattern = figure.printed or figure.readme
    if pattern in _PRINTED_VALUE:
        match = re.search(pattern, output, re.MULTILINE)
        return None if match is None else _PRINTED_VALUE[pattern](match)
    return figure.find(output, pattern)


def compare(readme: str, runs: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Each figure of the commands that ran, and its line: the README's value, the printed one(s), and
    ``ok``, ``different``, ``machine`` or ``not reproducible``."""
    lines = []
    for figure in FIGURES:
        if figure.command not in runs[0]:
            continue
        shown = figure.find(readme, figure.readme)
        printed = [printed_value(figure, run[figure.command]) for run in runs]
        if shown is None or None in printed:
            where = "the README" if shown is None else "the output"
            verdict = f"missing from {where}"
        elif len(set(printed)) > 1 and not figure.machine:
            verdict = "not reproducible"
        elif figure.machine:
            verdict = "machine"
        else:
            verdict = "ok" if printed[0] == shown else "different"
        values = " | ".join(str(p) for p in printed)
        lines.append((verdict, f"{figure.name}: README {shown!r}, printed {values!r}: {verdict}"))
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="first,sft,marin", help="first, sft, marin (default: all)")
    parser.add_argument("--twice", action="store_true", help="run each command twice, in two directories")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories and outputs")
    args = parser.parse_args(argv)
    asked = [word.strip() for word in args.only.split(",") if word.strip()]
    unknown = [word for word in asked if word not in GROUPS]
    if unknown:
        parser.error(f"--only {unknown[0]}: one of {', '.join(GROUPS)}")
    names = [name for name in COMMANDS if any(name in GROUPS[word] for word in asked)]
    readme = (ROOT / "README.md").read_text()
    runs = []
    for _ in range(2 if args.twice else 1):
        where = Path(tempfile.mkdtemp(prefix="check-readme-"))
        runs.append(run_commands(names, where))
        if args.keep:
            for name, output in runs[-1].items():
                (where / f"{name}.out").write_text(output)
            print(f"kept {where}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", str(where)], check=False)
    lines = compare(readme, runs)
    for _, line in lines:
        print(line)
    failed = [verdict for verdict, _ in lines if verdict not in ("ok", "machine")]
    print(f"{len(lines) - len(failed)} of {len(lines)} figures ok or machine-dependent; {len(failed)} not")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
