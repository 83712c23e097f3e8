"""The sandbox chat templates render in, configured as transformers configures its own, and the recorder of
where each `{% generation %}` block's text lands in the rendered string.

The environment is immutable and sandboxed, with `trim_blocks`, `lstrip_blocks` and loop controls; its
`tojson` keeps key order and non-ASCII; `raise_exception`, `strftime_now` and restricted `dict` and
`namespace` are its globals. A generation block renders its body and records the body's character span
after everything the render has given out so far, as transformers measures it. Jinja is imported on first
use.

>>> recorder = Recorder()
>>> token = RECORDER.set(recorder)
>>> template = compile_template("a{% generation %}b{% endgeneration %}")
>>> text = "".join(recorder.add(piece) for piece in template.generate())
>>> RECORDER.reset(token)
>>> text, recorder.spans
('ab', [(1, 2)])
"""

from __future__ import annotations

import contextvars
import functools
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

TEMPLATE_FILE = "<template>"  # the file name Jinja gives a template's frames in a traceback


@dataclass
class Recorder:
    """What one render has produced so far (its length in characters) and its generation spans."""

    length: int = 0
    spans: list[tuple[int, int]] = field(default_factory=list)

    def add(self, piece: str) -> str:
        """Count a piece the render gave out; the piece itself."""
        self.length += len(piece)
        return piece


RECORDER: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("chat_spans", default=None)


@functools.lru_cache(maxsize=64)
def compile_template(text: str) -> jinja2.Template:
    """The template `text` compiled in the sandbox (cached by text)."""
    return _environment().from_string(text)


@functools.lru_cache(maxsize=1)
def _environment():
    """The sandbox every template renders in, configured as transformers configures its own."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: renders its body, recording where the body lands."""

        tags = {"generation"}

        def parse(self, parser):
            line = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_record"), [], [], body).set_lineno(line)

        def _record(self, caller) -> str:
            body = caller()
            recorder = RECORDER.get()
            if recorder is not None:  # the body lands after everything the render has given out so far
                recorder.spans.append((recorder.length, recorder.length + len(body)))
            return body

    def raise_exception(message: str):
        raise jinja2.TemplateError(message)

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
        options = {"indent": indent, "separators": separators, "sort_keys": sort_keys}
        return json.dumps(value, ensure_ascii=ensure_ascii, **options)

    class Dicts:
        """`dict(...)` and `dict.fromkeys(...)` for templates, without handing them the type itself."""

        def __call__(self, *args, **kwargs) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs) -> dict:
            return dict.fromkeys(*args, **kwargs)

    def public(name) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"a namespace cannot hold {name!r}: it starts with '_'")

    class Namespace(jinja2.utils.Namespace):
        """Jinja's `namespace`, refusing attributes whose names start with an underscore."""

        def __init__(*args, **kwargs):  # no named `self`, as in Jinja's own: `namespace(self=1)` works
            attributes = dict(*args[1:], **kwargs)
            for name in attributes:
                public(name)
            jinja2.utils.Namespace.__init__(args[0], attributes)

        def __setitem__(self, name, value) -> None:
            public(name)
            super().__setitem__(name, value)

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals |= {
        "raise_exception": raise_exception,
        "strftime_now": strftime_now,
        "dict": Dicts(),
        "namespace": Namespace,
    }
    return environment


def failure(error: Exception) -> str:
    """`line N: reason` for an error compiling or rendering a template, on one line."""
    import jinja2

    line = getattr(error, "lineno", None)
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == TEMPLATE_FILE:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    reason = getattr(error, "message", None) or str(error) or type(error).__name__
    if not isinstance(error, jinja2.TemplateError):
        reason = f"{type(error).__name__}: {reason}"
    where = f"line {line}" if line is not None else "rendering"
    return f"{where}: {' '.join(str(reason).split())}"
