"""A small chat dataset made offline from the running Python's standard library: the user shows a short
function and asks about it; the assistant answers in one fixed, three-line format.

```
Function: <the def's name>
Parameters: <the parameters as in the def, annotations left out, each default written =...; or none>
Returns: <yes, no or generator>
```

`Returns` is `generator` when the function's own body (not a nested function, class or lambda) yields,
`yes` when it returns a value other than None, else `no`. The whole function is shown (only its docstring
is left out, when other statements follow it), so every answer is read off what the user sees: a tiny
model can learn it by copying the name and the signature and by looking for `return` and `yield`, and a
reply is checked by a regular expression (`answer_format_ok`) and compared with `expected_answer`.

The functions are those defined at the top level of a module or of a public class there, public ones and
`__init__`, with or without parameters, if short: at most `MAX_LINES` lines and `MAX_CHARS` characters
shown, so that a conversation is about 40 to 100 tokens with a code BPE and five or more pack into a
512-token row: the shorter the question, the more answers (the tokens trained on) a step holds, which is
what lets the default tiny model pick up the format within the 120 steps of `configs/tiny_sft.yaml`.

The question is one of a few phrasings, and one conversation in three starts with one of a few system
messages, both chosen by a SHA-256 of the module and the function's qualified name: the same Python
installation gives the same bytes on every run.

>>> import json, tempfile
>>> from pathlib import Path
>>> source = Path(tempfile.mkdtemp()) / "shapes.py"
>>> _ = source.write_text("def area(width, height=1, *, unit='m'):\\n    return width * height\\n")
>>> out = stdlib_chat(source.with_suffix(".jsonl"), files=[source])
>>> [conversation] = [json.loads(line) for line in open(out, encoding="utf-8")]
>>> [message["role"] for message in conversation["messages"]]
['system', 'user', 'assistant']
>>> print(conversation["messages"][1]["content"])
```python
def area(width, height=1, *, unit='m'):
    return width * height
```
<BLANKLINE>
What is this function called, what parameters does it take, and does it return a value?
>>> print(conversation["messages"][-1]["content"])
Function: area
Parameters: width, height=..., *, unit=...
Returns: yes
>>> expected_answer(conversation) == conversation["messages"][-1]["content"]
True
>>> answer_format_ok("Function: area\\nParameters: none\\nReturns: no"), answer_format_ok("It multiplies.")
(True, False)
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import os
import re
import sysconfig
import textwrap
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from meltemi.datastore.corpora import python_stdlib
from meltemi.datastore.errors import InputError
from meltemi.datastore.storage import file_to_write, local_path_of, url_scheme

MAX_LINES = 4
MAX_CHARS = 150
VERSION = 3  # of the conversations a library gives (3: its generated files left out); a cache names it

Conversation = dict[str, list[dict[str, str]]]

_SYSTEMS = (
    "You describe Python functions.",
    "You are a helpful assistant for Python programmers.",
    "Answer in three lines: Function, Parameters, Returns.",
)
_QUESTIONS = (
    "Describe this function.\n\n{code}",
    "{code}\n\nWhat is this function called, what parameters does it take, and does it return a value?",
    "Here is `{qualname}` from the `{module}` module:\n\n{code}\n\nSummarize its signature.",
    "What does the signature of this Python function look like?\n\n{code}",
)
_CODE = re.compile(r"```python\n(.*?)\n```", re.DOTALL)
_NAME = r"[^\W\d]\w*"
_PARAMETER = rf"(?:\*{{1,2}}{_NAME}|{_NAME}(?:=\.\.\.)?|/|\*)"
_ANSWER = re.compile(
    rf"Function: (?P<name>{_NAME})\n"
    rf"Parameters: (?P<parameters>none|{_PARAMETER}(?:, {_PARAMETER})*)\n"
    r"Returns: (?P<returns>yes|no|generator)"
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


class Answer(NamedTuple):
    """The three fields of an answer."""

    name: str
    parameters: str
    returns: str


def stdlib_chat(
    out: str | os.PathLike, *, files: Sequence[str | os.PathLike] | None = None, limit: int | None = None
) -> str:
    """Write the conversations about `files` (default: `corpora.python_stdlib()`; local Python files) to the
    JSON Lines file `out` (local or in a bucket), at most `limit` of them, and return its path. A local file
    is written aside and renamed, an object in one request, so a failed or killed run never leaves a
    partial file at `out`.

    Each line is `{"messages": [{"role": ..., "content": ...}, ...]}`: an optional system message, the
    user's question, the assistant's answer. Files are read in the order given (the default is sorted),
    functions in source order; a file that is not UTF-8 or does not parse is skipped (one that cannot be
    read is an error), and a function whose shown code repeats an earlier one's is left out.

    Measured on CPython 3.11.7's library (665 files, 2 shared cores): 4,157 conversations, 1,402,325
    bytes (365,008 tokens with the default 8,192-token stdlib BPE and the llama3 template), in 3 s.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be at least 0, got {limit}")
    remote = [os.fspath(path) for path in files or () if local_path_of(path) is None]
    if remote:
        raise InputError(f"stdlib_chat: {remote[0]!r}: a URL; it reads local Python files (copy them here)")
    folder, key = file_to_write(out, "stdlib_chat.jsonl")
    found = itertools.islice(conversations(python_stdlib() if files is None else files), limit)
    lines = (json.dumps(conversation, ensure_ascii=False) + "\n" for conversation in found)
    if folder.location.local_path is None:
        folder.write_text(key, "".join(lines))
        return os.fspath(out)
    out = Path(out) if url_scheme(out) is None else folder.location.local_path / key
    out.parent.mkdir(parents=True, exist_ok=True)
    aside = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(aside, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(aside, out)
    except BaseException:
        aside.unlink(missing_ok=True)
        raise
    return os.fspath(out)


def conversations(files: Iterable[str | os.PathLike]) -> Iterator[Conversation]:
    """The conversations `stdlib_chat` writes, one at a time."""
    seen: set[str] = set()
    for path in files:
        try:
            source = Path(path).read_bytes().decode("utf-8")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(source)
        except (SyntaxError, ValueError):  # UnicodeDecodeError is a ValueError, as are null bytes
            continue
        lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        module = _module_name(path)
        for qualname, node in _functions(tree.body):
            code = _shown_code(node, lines)
            if code is not None and code not in seen:
                seen.add(code)
                yield _conversation(module, qualname, code)


def answer_format_ok(text: str) -> bool:
    """Whether `text` (surrounding whitespace aside) is an answer in the fixed format."""
    return parse_answer(text) is not None


def parse_answer(text: str) -> Answer | None:
    """The fields of an answer in the fixed format, or None if `text` does not follow it."""
    match = _ANSWER.fullmatch(text.strip())
    return None if match is None else Answer(match["name"], match["parameters"], match["returns"])


def expected_answer(conversation: Mapping[str, Any]) -> str:
    """The answer to a conversation's (last) question, worked out from the code it shows."""
    question = [m["content"] for m in conversation["messages"] if m["role"] == "user"][-1]
    match = _CODE.search(question)
    if match is None:
        raise ValueError("the user's message shows no ```python block")
    function = ast.parse(match[1]).body[0]
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
        raise ValueError("the code shown is not a function")
    return _describe(function)


def _describe(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    parameters, returns = _parameters(function.args), _returns(function)
    return f"Function: {function.name}\nParameters: {parameters}\nReturns: {returns}"


def _parameters(args: ast.arguments) -> str:
    def bare(arg: ast.arg | None) -> ast.arg | None:
        return None if arg is None else ast.arg(arg=arg.arg, annotation=None)

    elided = ast.arguments(
        posonlyargs=[bare(a) for a in args.posonlyargs],
        args=[bare(a) for a in args.args],
        vararg=bare(args.vararg),
        kwonlyargs=[bare(a) for a in args.kwonlyargs],
        kw_defaults=[None if d is None else ast.Constant(...) for d in args.kw_defaults],
        kwarg=bare(args.kwarg),
        defaults=[ast.Constant(...) for _ in args.defaults],
    )
    return ast.unparse(elided) or "none"


def _returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    stack: list[ast.AST] = list(function.body)
    returns = False
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):  # a nested function's returns and yields are its own
            continue
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return "generator"
        if isinstance(node, ast.Return) and node.value is not None:
            returns |= not (isinstance(node.value, ast.Constant) and node.value.value is None)
        stack.extend(ast.iter_child_nodes(node))
    return "yes" if returns else "no"


def _functions(
    body: list[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The public functions of a module's or class's body (and `__init__`), in source order."""
    for node in body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if not node.name.startswith("_") or node.name == "__init__":
                yield prefix + node.name, node


def _shown_code(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> str | None:
    """The function's source from its `def` to its end, dedented, less a docstring that other statements
    follow; None if that is too long or does not parse back to the same function."""
    body = function.body
    dropped = range(0)
    docstring = ast.get_docstring(function, clean=False) is not None
    if (
        docstring
        and len(body) > 1
        and function.lineno < body[0].lineno
        and body[0].end_lineno < body[1].lineno
    ):
        dropped = range(body[0].lineno, body[0].end_lineno + 1)
    shown = [lines[n - 1] for n in range(function.lineno, function.end_lineno + 1) if n not in dropped]
    code = textwrap.dedent("\n".join(shown))
    if len(shown) > MAX_LINES or len(code) > MAX_CHARS or "```" in code:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            [parsed] = ast.parse(code).body
    except (SyntaxError, ValueError):  # a string that dedent could not shift, a docstring sharing a line
        return None
    if not isinstance(parsed, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    return code if _describe(parsed) == _describe(function) else None


def _conversation(module: str, qualname: str, code: str) -> Conversation:
    digest = hashlib.sha256(f"{module}:{qualname}".encode()).digest()
    fenced = f"```python\n{code}\n```"
    messages = []
    if digest[0] % 3 == 0:
        messages.append({"role": "system", "content": _SYSTEMS[digest[1] % len(_SYSTEMS)]})
    question = _QUESTIONS[digest[2] % len(_QUESTIONS)].format(code=fenced, qualname=qualname, module=module)
    messages.append({"role": "user", "content": question})
    messages.append({"role": "assistant", "content": expected_answer({"messages": messages})})
    return {"messages": messages}


def _module_name(path: str | os.PathLike) -> str:
    """`json.decoder` for the library's `json/decoder.py`; the file's stem for a file outside it."""
    path = Path(path).resolve()
    root = Path(sysconfig.get_paths()["stdlib"]).resolve()
    if not path.is_relative_to(root):
        return path.stem
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)
