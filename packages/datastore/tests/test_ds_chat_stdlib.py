"""The standard library's chat dataset: deterministic, well formed, and every answer true to the source."""

import ast
import json
import os
import re
import textwrap
from pathlib import Path

import pytest

from meltemi.datastore import corpora
from meltemi.datastore.chat.stdlib import (
    MAX_LINES,
    answer_format_ok,
    conversations,
    expected_answer,
    parse_answer,
    stdlib_chat,
)

SAMPLE = (
    textwrap.dedent(
        '''\
    """A module made for the tests."""


    def nothing():
        pass


    def star(*args, **kwargs):
        return args


    def keyword_only(a, b=1, *, c, d: int = None):
        """A docstring that the question leaves out."""
        return None


    def positional(a, /, b, *rest, key=0, **options):
        yield a


    def outer(x):
        def inner(): return x
        callback = lambda: x
        inner(), callback()


    def _private(a):
        return a


    class Box:
        def __init__(self, size: int = 3) -> None:
            self.size = size

        def _hidden(self):
            return 1

        async def fetch(self, url, *, timeout: float = 1.0):
            return await url

        def close(self):
            pass


    class Crate:
        def close(self):
            pass


    class _Private:
        def visible(self):
            return 1
    '''
    )
    + "\n\ndef long(a):\n"
    + "".join(f"    a += {i}\n" for i in range(MAX_LINES))
    + "    return a\n"
)
SAMPLE_ANSWERS = [
    ("nothing", "none", "no"),
    ("star", "*args, **kwargs", "yes"),
    ("keyword_only", "a, b=..., *, c, d=...", "no"),
    ("positional", "a, /, b, *rest, key=..., **options", "generator"),
    ("outer", "x", "no"),
    ("__init__", "self, size=...", "no"),
    ("fetch", "self, url, *, timeout=...", "yes"),
    ("close", "self", "no"),  # Box.close; Crate.close shows the same code and is left out
]


@pytest.fixture
def sample(tmp_path) -> Path:
    path = tmp_path / "sample.py"
    path.write_text(SAMPLE, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def library_files() -> list[str]:
    """A spread of the standard library: every 20th module, plus json and heapq."""
    files = corpora.python_stdlib()
    chosen = set(files[::20]) | {f for f in files if "/json/" in f or f.endswith("/heapq.py")}
    return sorted(chosen)


def _signature(args: ast.arguments) -> str:
    """The parameters as the format writes them, worked out independently of the module."""
    parts = []
    positional = args.posonlyargs + args.args
    first_default = len(positional) - len(args.defaults)
    for i, arg in enumerate(positional):
        parts.append(arg.arg + ("=..." if i >= first_default else ""))
        if i == len(args.posonlyargs) - 1:
            parts.append("/")
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    parts += [
        arg.arg + ("" if d is None else "=...")
        for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return ", ".join(parts) or "none"


class _OwnBody(ast.NodeVisitor):
    """Whether a function's own body (nested scopes aside) yields or returns a value."""

    def __init__(self) -> None:
        self.returns = self.yields = False

    def visit_FunctionDef(self, node: ast.AST) -> None:
        pass

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef

    def visit_Return(self, node: ast.Return) -> None:
        self.returns |= node.value is not None and ast.unparse(node.value) != "None"
        self.generic_visit(node)

    def visit_Yield(self, node: ast.AST) -> None:
        self.yields = True

    visit_YieldFrom = visit_Yield


def _facts(path: str | os.PathLike) -> dict[str, set[tuple[str, str]]]:
    """Every function and method of a file by name: the (parameters, returns) of each with that name."""
    facts: dict[str, set[tuple[str, str]]] = {}
    for node in ast.walk(ast.parse(Path(path).read_bytes())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = _OwnBody()
            for statement in node.body:
                body.visit(statement)
            returns = "generator" if body.yields else "yes" if body.returns else "no"
            facts.setdefault(node.name, set()).add((_signature(node.args), returns))
    return facts


def _read(path: str | os.PathLike) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_the_same_files_give_the_same_bytes_in_a_fixed_layout(tmp_path, library_files):
    first = stdlib_chat(tmp_path / "a.jsonl", files=library_files)
    second = stdlib_chat(tmp_path / "b.jsonl", files=library_files)
    data = Path(first).read_bytes()
    assert first == os.fspath(tmp_path / "a.jsonl") and data == Path(second).read_bytes()
    lines = data.decode("utf-8").splitlines(keepends=True)
    assert len(lines) > 100 and all(line.endswith("\n") for line in lines)
    systems = 0
    for line in lines:
        conversation = json.loads(line)
        assert line == json.dumps(conversation, ensure_ascii=False) + "\n"
        assert list(conversation) == ["messages"]
        messages = conversation["messages"]
        assert all(list(m) == ["role", "content"] and isinstance(m["content"], str) for m in messages)
        roles = [m["role"] for m in messages]
        assert roles in (["user", "assistant"], ["system", "user", "assistant"])
        systems += roles[0] == "system"
    assert 0.2 < systems / len(lines) < 0.5  # one in three, by a hash of each function's name
    questions = {json.loads(line)["messages"][-2]["content"] for line in lines}
    phrasings = {
        re.sub(r"`[^`]*`", "NAME", re.sub(r"```python\n.*?\n```", "CODE", q, flags=re.S)) for q in questions
    }
    assert len(phrasings) == 4 and all(p.count("CODE") == 1 for p in phrasings)


def test_a_bucket_gets_the_local_files_bytes_and_a_url_among_the_files_is_refused(tmp_path, library_files):
    from meltemi.datastore import InputError
    from meltemi.datastore.storage import read_object

    files = library_files[:20]
    local = Path(stdlib_chat(tmp_path / "a.jsonl", files=files)).read_bytes()
    assert stdlib_chat("memory://chat-test/out/a.jsonl", files=files) == "memory://chat-test/out/a.jsonl"
    assert read_object("memory://chat-test/out/a.jsonl") == local
    with pytest.raises(InputError, match=r"^stdlib_chat: 'gs://b/x.py': a URL; it reads local Python files"):
        stdlib_chat(tmp_path / "b.jsonl", files=[*files, "gs://b/x.py"])
    assert not (tmp_path / "b.jsonl").exists() and not list(tmp_path.glob("gs:*"))


def test_every_answer_follows_the_format_and_the_source(library_files):
    count = 0
    for path in library_files:
        facts = _facts(path)
        source = Path(path).read_text(encoding="utf-8")
        for conversation in conversations([path]):
            answer = conversation["messages"][-1]["content"]
            assert answer_format_ok(answer) and answer == expected_answer(conversation)
            name, parameters, returns = parse_answer(answer)
            assert (parameters, returns) in facts[name], (path, answer)
            question = conversation["messages"][-2]["content"]
            code = question.split("```python\n")[1].split("\n```")[0]
            assert code.startswith(("def ", "async def ")) and len(code.splitlines()) <= MAX_LINES
            assert all(line.strip() in source for line in code.splitlines())
            count += 1
    assert count > 100


def test_known_functions_of_the_library():
    answers = {}
    for conversation in conversations(
        f for f in corpora.python_stdlib() if f.endswith(("/heapq.py", "/shlex.py"))
    ):
        answer = conversation["messages"][-1]["content"]
        answers[parse_answer(answer).name] = answer
    assert answers["heappush"] == "Function: heappush\nParameters: heap, item\nReturns: no"
    assert answers["join"] == "Function: join\nParameters: split_command\nReturns: yes"
    assert "heappushpop" not in answers  # five lines without its docstring: too long to show


def test_signatures_returns_and_eligibility(sample):
    found = list(conversations([sample]))
    assert [tuple(parse_answer(c["messages"][-1]["content"])) for c in found] == SAMPLE_ANSWERS
    shown = {c["messages"][-1]["content"].split("\n")[0]: c["messages"][-2]["content"] for c in found}
    assert "A docstring" not in shown["Function: keyword_only"]
    assert (
        "def keyword_only(a, b=1, *, c, d: int = None):\n    return None\n" in shown["Function: keyword_only"]
    )
    assert "def __init__(self, size: int = 3) -> None:\n    self.size = size\n" in shown["Function: __init__"]


def test_the_answer_format():
    assert answer_format_ok("Function: f\nParameters: none\nReturns: no\n")
    assert answer_format_ok(
        "Function: get\nParameters: self, key, /, default=..., *, strict=..., **kw\nReturns: yes"
    )
    assert not answer_format_ok("Function: f\nParameters: \nReturns: no")
    assert not answer_format_ok("Function: f\nReturns: yes\nParameters: a")
    assert not answer_format_ok("Function: f\nParameters: a\nReturns: maybe")
    assert not answer_format_ok("Function: f\nParameters: a=1\nReturns: yes")
    assert not answer_format_ok("def f(a):\n    return a")
    assert parse_answer("Function: f\nParameters: a\nReturns: generator") == ("f", "a", "generator")


def test_files_that_do_not_decode_or_parse_are_skipped(tmp_path, sample):
    broken = tmp_path / "broken.py"
    broken.write_text("def ok(a):\n    return a\n\ndef broken(:\n    pass\n")
    latin = tmp_path / "latin.py"
    latin.write_bytes("def caf\u00e9(a):\n    return '\u00e9'\n".encode("latin-1"))
    nulls = tmp_path / "nulls.py"
    nulls.write_bytes(b"def f(a):\n    return a\0\n")
    alone = Path(stdlib_chat(tmp_path / "alone.jsonl", files=[sample])).read_bytes()
    mixed = stdlib_chat(tmp_path / "mixed.jsonl", files=[broken, sample, latin, nulls])
    assert Path(mixed).read_bytes() == alone and len(_read(mixed)) == len(SAMPLE_ANSWERS)


def test_a_failed_write_leaves_no_file(tmp_path, sample):
    out = tmp_path / "chat.jsonl"
    with pytest.raises(IsADirectoryError):  # an unreadable input, after some lines were written
        stdlib_chat(out, files=[sample, tmp_path])
    assert os.listdir(tmp_path) == ["sample.py"]
    stdlib_chat(out, files=[sample])
    before = out.read_bytes()
    with pytest.raises(IsADirectoryError):
        stdlib_chat(out, files=[sample, sample, tmp_path])
    assert out.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["chat.jsonl", "sample.py"]


def test_limit(tmp_path, library_files):
    everything = Path(stdlib_chat(tmp_path / "all.jsonl", files=library_files)).read_text().splitlines()
    first = Path(stdlib_chat(tmp_path / "first.jsonl", files=library_files, limit=5)).read_text().splitlines()
    assert first == everything[:5] and len(everything) > 5
    assert Path(stdlib_chat(tmp_path / "none.jsonl", files=library_files, limit=0)).read_bytes() == b""
    with pytest.raises(ValueError, match="limit"):
        stdlib_chat(tmp_path / "bad.jsonl", files=library_files, limit=-1)
    assert not (tmp_path / "bad.jsonl").exists()
