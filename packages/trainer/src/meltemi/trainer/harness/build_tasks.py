"""Build the shipped tasks' data from the standard library's test suites, which the default corpus leaves
out (``corpora.python_stdlib()`` skips them): held-out Python that the machine always has.

    python -m meltemi.trainer.harness.build_tasks [--out DIR_OR_URL]

writes into ``meltemi/trainer/harness/tasks/`` (or ``DIR_OR_URL``: a folder, or a bucket's, through the
storage layer as every other output):

- ``stdlib_next_line.jsonl``: six lines of a file, then its next line among three lines of about the same
  length drawn from all the held-out files (multiple choice);
- ``stdlib_return.jsonl``: a function up to ``return``, then its returned expression among three from other
  functions (multiple choice, and exact match when generated);
- ``stdlib_files.jsonl``: the opening of whole files (log-likelihood, perplexity, bits per byte);
- ``manifest.json``: the Python version the files came from, the seed, the counts, each file's SHA-256.

The same Python version and seed give byte-identical files: files and lines are taken in sorted order and
drawn by one seeded ``random.Random``.

>>> lines = ["def f(x):", "    total = x", "    total += 2", "    total *= 3", "    return total"]
>>> [doc] = next_line_docs([("a.py", lines)], random.Random(0), count=1, context_lines=2)
>>> doc["context"], doc["choices"][doc["label"]], len(doc["choices"])
('    total = x\\n    total += 2\\n', '    total *= 3', 4)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import hashlib
import json
import os
import random
import sys
import sysconfig
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

from meltemi.datastore import corpora
from meltemi.datastore.storage import Directory

SEED = 2025
CHOICES = 4
TASKS_DIR = Path(__file__).resolve().parent / "tasks"
Source = tuple[str, list[str]]  # (path relative to the standard library, its lines)


def held_out_sources() -> list[Source]:
    """The standard library's test-suite files that are UTF-8 (some are broken on purpose), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    everything = corpora.python_stdlib(include_tests=True, include_generated=True)
    tests = sorted(set(everything) - set(corpora.python_stdlib(include_generated=True)))
    sources = []
    for path in tests:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if "\t" not in text and "\r" not in text:
            sources.append((str(Path(path).relative_to(root)), text.split("\n")))
    return sources


def _similar(pool: list[str], target: str, rng: random.Random, count: int) -> list[str]:
    """``count`` distinct lines of ``pool`` within a quarter of ``target``'s length, other than it."""
    lo, hi = int(len(target) * 0.75), int(len(target) * 1.25) + 1
    near = sorted({line for line in pool if lo <= len(line) <= hi and line != target})
    return rng.sample(near, count) if len(near) >= count else []


def _choice_doc(context: str, answer: str, distractors: list[str], rng: random.Random, **extra) -> dict:
    choices = [answer, *distractors]
    rng.shuffle(choices)
    return {"context": context, "choices": choices, "label": choices.index(answer), **extra}


def next_line_docs(
    sources: Sequence[Source], rng: random.Random, *, count: int, context_lines: int
) -> list[dict]:
    """``count`` documents: ``context_lines`` lines of a file, its next (non-blank) line the answer."""
    candidates = []
    for name, lines in sources:
        blank = [not line.strip() for line in lines]
        blanks_before = sum(blank[:context_lines])  # blank lines among the context_lines before line i
        for i in range(context_lines, len(lines)):
            line = lines[i]
            if not blanks_before and 8 <= len(line.strip()) and len(line) <= 80:
                candidates.append((name, i))
            blanks_before += blank[i] - blank[i - context_lines]
    pool = sorted({line for _, lines in sources for line in lines if len(line.strip()) >= 8})
    by_name = dict(sources)
    docs = []
    for name, i in rng.sample(candidates, min(count * 2, len(candidates))):
        lines = by_name[name]
        distractors = _similar([line for line in rng.sample(pool, min(400, len(pool)))], lines[i], rng, 3)
        if distractors and len(docs) < count:
            context = "\n".join(lines[i - context_lines : i]) + "\n"
            docs.append(_choice_doc(context, lines[i], distractors, rng, source=f"{name}:{i + 1}"))
    return docs


# The fields holding statements (and except handlers, match cases), in the order every node type lists them.
_STATEMENT_LISTS = ("body", "handlers", "orelse", "finalbody", "cases")


def _statements(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``ast.walk(root)`` that are statements or hold them, in ``ast.walk``'s order.

    Every ancestor of a statement is one of these, so a breadth-first walk that reads only the fields
    holding statements meets them in the same order as one that visits every node, in under half the
    time (1.3 CPU-seconds for the held-out files instead of 3.1).

    >>> tree = ast.parse("def f(x):\\n    if x:\\n        return 1\\n    return [y for y in x]")
    >>> [getattr(node, "lineno", 0) for node in _statements(tree)]  # line 4's return before line 3's
    [0, 1, 2, 4, 3]
    """
    todo = deque([root])
    while todo:
        node = todo.popleft()
        yield node
        for field in _STATEMENT_LISTS:
            todo.extend(getattr(node, field, ()))


def _returns(name: str, lines: list[str]) -> list[tuple[str, str, str]]:
    """``(context up to 'return ', expression, where)`` for each one-line ``return <expr>`` in a function."""
    if not any("return " in line for line in lines):  # no line to take: skip parsing (a third of the files)
        return []
    try:
        with warnings.catch_warnings():  # the test suites hold invalid escapes on purpose
            warnings.simplefilter("ignore")
            tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    found = []
    for function in _statements(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in _statements(function):
            if isinstance(node, ast.Return) and node.value is not None and node.lineno == node.end_lineno:
                line = lines[node.lineno - 1]
                head, _, expression = line.partition("return ")
                if head.strip() or not 3 <= len(expression) <= 60 or expression.rstrip() != expression:
                    continue
                first = max(function.lineno - 1, node.lineno - 12)
                context = "\n".join(lines[first : node.lineno - 1] + [head + "return"])
                found.append((context, " " + expression, f"{name}:{node.lineno}"))
    return found


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off inside (as it was after).

    Parsing the held-out files makes millions of AST nodes, each allocation counting towards the next
    collection, and each full collection walks every object of the process: where JAX and the trainer are
    imported, building the tasks took 6.6 CPU-seconds with it and 3.2 without (in the harness tests'
    process, 8.3 against 3.1). A tree has no cycles: reference counting frees it once its file is read.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def return_docs(sources: Sequence[Source], rng: random.Random, *, count: int) -> list[dict]:
    """``count`` documents: a function up to ``return``, the returned expression the answer."""
    with _no_cyclic_gc():
        found = [r for name, lines in sources for r in _returns(name, lines)]
    pool = sorted({expression for _, expression, _ in found})
    docs = []
    for context, expression, where in rng.sample(found, min(count * 2, len(found))):
        distractors = _similar(pool, expression, rng, 3)
        if distractors and len(docs) < count:
            docs.append(_choice_doc(context, expression, distractors, rng, source=where))
    return docs


def file_docs(sources: Sequence[Source], rng: random.Random, *, count: int, chars: int) -> list[dict]:
    """``count`` documents: the first ``chars`` characters (whole lines) of a file."""
    docs = []
    for name, lines in rng.sample(list(sources), count):
        text = ""
        for line in lines:
            if len(text) + len(line) + 1 > chars:
                break
            text += line + "\n"
        docs.append({"text": text, "source": name})
    return docs


def build(out: str | os.PathLike = TASKS_DIR, seed: int = SEED) -> dict[str, int]:
    """Write every task's data into ``out`` (a folder or a bucket's URL); return how many documents each
    file has."""
    sources = held_out_sources()
    rng = random.Random(seed)
    data = {
        "stdlib_next_line.jsonl": next_line_docs(sources, rng, count=300, context_lines=6),
        "stdlib_return.jsonl": return_docs(sources, rng, count=300),
        "stdlib_files.jsonl": file_docs(sources, rng, count=40, chars=1500),
    }
    target = Directory(out)
    manifest = {"python": sys.version.split()[0], "seed": seed, "held_out_files": len(sources), "files": {}}
    for name, docs in data.items():
        text = "".join(json.dumps(doc, ensure_ascii=False, sort_keys=True) + "\n" for doc in docs)
        target.write_text(name, text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        manifest["files"][name] = {"documents": len(docs), "sha256": digest}
    target.write_text("manifest.json", json.dumps(manifest, indent=2) + "\n")
    return {name: len(docs) for name, docs in data.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(TASKS_DIR), help="folder or URL (default: the package's)")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    for name, count in build(args.out, args.seed).items():
        print(f"{Directory(args.out).where(name)}: {count} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
