"""Chat templates: conversations rendered to one string by a Jinja template, the assistant's part found
from the template's `{% generation %}` blocks, with the semantics of transformers' `apply_chat_template`.

A template renders in a sandbox configured as transformers configures it (immutable, `trim_blocks`,
`lstrip_blocks`, loop controls; `tojson` keeping key order and non-ASCII; `raise_exception`, `strftime_now`,
and restricted `dict` and `namespace`), with the same variables (`messages`, `add_generation_prompt`,
`tools`, `documents` and the special tokens such as `bos_token`). Each generation block's rendered text is
recorded as character offsets in the final string; `assistant_mask` turns them into the per-token mask that
`return_assistant_tokens_mask` gives, quirks included, from the offsets of the same tokenization.

Jinja is imported on first use: the token store imports this module for its constants alone.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from meltemi.datastore.chat.jinja import RECORDER, Recorder, compile_template, failure
from meltemi.datastore.errors import ChatTemplateError

if TYPE_CHECKING:
    from tokenizers import Encoding

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TURN = "<|eot_id|>"
CHAT_SPECIAL_TOKENS: tuple[str, ...] = (
    BEGIN_OF_TEXT,
    "<|start_header_id|>",
    "<|end_header_id|>",
    END_OF_TURN,
)
"""The tokens the shipped template writes, each one token in the stdlib tokenizer (ids 1 to 4)."""
LLAMA3_SPECIAL_TOKENS: Mapping[str, str] = {"bos_token": BEGIN_OF_TEXT, "eos_token": END_OF_TURN}
SHIPPED_SOURCE = "the shipped llama3 template"
_CONTINUE = (
    "CONTINUE_FINAL_MESSAGE_TAG "  # marks where a continued message's content ends, as transformers does
)

# The template variables transformers passes from a tokenizer's configuration: these names, any other
# `*_token` holding a token, and the named `extra_special_tokens`.
TOKENIZER_CONFIG = "tokenizer_config.json"
_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_GENERATION_TAG = re.compile(r"\{%[-+]?\s*generation\s*[-+]?%\}")
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")  # names transformers fills from each other


@dataclass(frozen=True)
class RenderedChat:
    """A rendered conversation: its text, and the `[start, stop)` character spans its generation blocks
    rendered, in the order they were rendered."""

    text: str
    generation_spans: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class ChatTemplate:
    """A Jinja chat template (`text`), where it came from (`source`, for messages), and the special tokens it
    is rendered with (`bos_token`, `eos_token`, ...). Its syntax is checked when it is made.

    >>> chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}]
    >>> rendered = ChatTemplate.llama3().render(chat)
    >>> print(rendered.text)
    <|begin_of_text|><|start_header_id|>user<|end_header_id|>
    Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>
    Hey<|eot_id|>
    >>> [rendered.text[a:b] for a, b in rendered.generation_spans]
    ['Hey<|eot_id|>']
    >>> ChatTemplate("{% if %}", "my.jinja", {})
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.ChatTemplateError: chat template my.jinja, line 1: Expected an expression...
    """

    text: str
    source: str
    special_tokens: Mapping[str, str] = field(default_factory=lambda: dict(LLAMA3_SPECIAL_TOKENS), hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "special_tokens", dict(self.special_tokens))  # a plain dict: it pickles
        if bad := [name for name, token in self.special_tokens.items() if not isinstance(token, str)]:
            raise ChatTemplateError(f"chat template {self.source}: special tokens {bad} are not strings")
        self._compiled()

    @classmethod
    def llama3(cls, special_tokens: Mapping[str, str] | None = None) -> ChatTemplate:
        """The shipped template, the Llama 3 layout: `bos_token` once, then each message as
        `<|start_header_id|>ROLE<|end_header_id|>\\n` + its content, trimmed, + `<|eot_id|>`; the assistant's
        content and its `<|eot_id|>` are in a generation block. `add_generation_prompt` appends the
        assistant's header.

        >>> ChatTemplate.llama3().render([], add_generation_prompt=True).text
        '<|begin_of_text|><|start_header_id|>assistant<|end_header_id|>\\n'
        """
        text = importlib.resources.files(__package__).joinpath("templates", "llama3.jinja").read_text("utf-8")
        return cls(text, SHIPPED_SOURCE, LLAMA3_SPECIAL_TOKENS if special_tokens is None else special_tokens)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike, special_tokens: Mapping[str, str] | None = None
    ) -> ChatTemplate:
        """The template in a Jinja file (a path or URL), rendered with `special_tokens` (default: the shipped
        template's).

        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "plain.jinja"
        >>> _ = path.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}")
        >>> ChatTemplate.from_file(path).render([{"role": "user", "content": "Hi"}]).text
        'user: Hi\\n'
        """
        source = os.fspath(path)
        text = _read_text(source, f"chat template {source}")
        return cls(text, source, LLAMA3_SPECIAL_TOKENS if special_tokens is None else special_tokens)

    @classmethod
    def from_tokenizer_config(cls, path: str | os.PathLike) -> ChatTemplate:
        """The template of a Hugging Face tokenizer directory (or its `tokenizer_config.json`; a path, or a
        URL read through the storage seam), as
        transformers 5 loads it: `chat_template.jinja` beside the configuration when there is one, else the
        configuration's `chat_template` (a string, or a list of `{name, template}` whose `default` is used);
        with the configuration's special tokens (strings or `{"content": ...}`; those of a legacy
        `special_tokens_map.json` beside it instead when the configuration has no `added_tokens_decoder`).

        >>> import json, pathlib, tempfile
        >>> directory = pathlib.Path(tempfile.mkdtemp())
        >>> template = "{{ bos_token }}{{ messages[0].content }}"
        >>> config = {"chat_template": template, "bos_token": {"content": "<s>"}}
        >>> _ = (directory / "tokenizer_config.json").write_text(json.dumps(config))
        >>> ChatTemplate.from_tokenizer_config(directory).render([{"role": "user", "content": "Hi"}]).text
        '<s>Hi'
        """
        given = os.fspath(path)
        named_file = given.rstrip("/").rpartition("/")[2] == TOKENIZER_CONFIG or file_bytes(given) is not None
        config_path = given if named_file else f"{given.rstrip('/')}/{TOKENIZER_CONFIG}"
        config = _read_config(config_path)
        legacy_path = _beside(config_path, "special_tokens_map.json")
        legacy = file_bytes(legacy_path)
        if "added_tokens_decoder" not in config and legacy is not None:
            config |= {k: v for k, v in _parse_config(legacy, legacy_path).items() if k != "chat_template"}
        special_tokens = _special_tokens(config, config_path)
        beside = _beside(config_path, "chat_template.jinja")
        if (template := file_bytes(beside)) is not None:
            return cls(_decoded(template, f"chat template {beside}"), beside, special_tokens)
        return cls(_configured_template(config, config_path), config_path, special_tokens)

    @property
    def sha256(self) -> str:
        """The SHA-256 of the template's text (UTF-8)."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def reads_tools(self) -> bool:
        """Whether the template reads the `tools` variable (as a name, not inside another word): whether tool
        definitions given to `render` reach the text.

        >>> ChatTemplate.llama3().reads_tools
        False
        """
        return re.search(r"\btools\b", self.text) is not None

    @property
    def has_generation_blocks(self) -> bool:
        """Whether the template has a `{% generation %}` tag (with whitespace control or not)."""
        return _GENERATION_TAG.search(self.text) is not None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        **variables: Any,
    ) -> RenderedChat:
        """`messages` rendered, with the generation blocks' spans. As in transformers, a message's keys whose
        value is None are left out, a message's reasoning is given under each of its usual names, and
        `variables` override the special tokens. A failing render is a `ChatTemplateError` naming the line.
        With `continue_final_message` the last message is left open, its end-of-turn cut off, so that a
        model continues it (as transformers' option of that name: how lm-eval prefills an answer).

        >>> reply = {"role": "assistant", "content": " Yes. ", "name": None}
        >>> rendered = ChatTemplate.llama3().render([reply])
        >>> rendered.text[rendered.generation_spans[0][0]:]
        'Yes.<|eot_id|>'
        """
        if continue_final_message:
            return self._continued(messages, add_generation_prompt, variables)
        context = {"tools": None, "documents": None, **self.special_tokens, **variables}
        context |= {"messages": [_template_message(m) for m in messages]}
        context["add_generation_prompt"] = add_generation_prompt
        compiled, recorder = self._compiled(), Recorder()
        token = RECORDER.set(recorder)
        try:
            text = "".join(recorder.add(piece) for piece in compiled.generate(**context))
        except Exception as e:
            raise ChatTemplateError(f"chat template {self.source}, {failure(e)}") from None
        finally:
            RECORDER.reset(token)
        return RenderedChat(text, tuple(recorder.spans))

    def _continued(
        self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool, variables: Mapping[str, Any]
    ) -> RenderedChat:
        """The conversation rendered up to the end of its last message's content (a marker appended to the
        content shows where the template put it; the marker and what follows are cut)."""
        if add_generation_prompt:
            raise ChatTemplateError("add_generation_prompt and continue_final_message exclude each other")
        if not messages or not isinstance(messages[-1].get("content"), str):
            raise ChatTemplateError("continue_final_message needs a last message with text content")
        final = messages[-1]["content"]
        marked = [*messages[:-1], {**messages[-1], "content": final + _CONTINUE}]
        rendered = self.render(marked, **variables)
        if final.strip() not in rendered.text or _CONTINUE.strip() not in rendered.text:
            raise ChatTemplateError(
                f"chat template {self.source}: the final message does not appear in the rendered "
                "conversation, "
                "so it cannot be continued"
            )
        at = rendered.text.rindex(_CONTINUE.strip())
        whole = rendered.text[at : at + len(_CONTINUE)] == _CONTINUE
        text = rendered.text[:at] if whole else rendered.text[:at].rstrip()
        spans = tuple((a, min(b, len(text))) for a, b in rendered.generation_spans if a < len(text))
        return RenderedChat(text, spans)

    def _compiled(self):
        try:
            return compile_template(self.text)
        except Exception as e:
            raise ChatTemplateError(f"chat template {self.source}, {failure(e)}") from None


def assistant_mask(encoding: Encoding, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """1 for each token of `encoding` in a generation span, else 0, as transformers'
    `return_assistant_tokens_mask` computes it: for each span in order, from the token of its first
    character to the token of its last; to the end when the last character has no token (or its token is
    the first, index 0); and no span from the first one whose first character has no token.

    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> tokenizer = Tokenizer(models.WordLevel({"a": 0, "b": 1, "c": 2}, unk_token="a"))
    >>> tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> assistant_mask(tokenizer.encode("a b c"), [(2, 3)]).tolist()
    [0, 1, 0]
    """
    mask = np.zeros(len(encoding.ids), np.uint8)
    for start, stop in spans:
        first = encoding.char_to_token(start)
        if first is None:
            break
        if stop < 1:  # transformers fails on it too (no character before the first)
            raise ValueError(f"a generation span {start, stop} ends before the text starts")
        last = encoding.char_to_token(stop - 1)
        mask[first : last + 1 if last else len(mask)] = 1
    return mask


def _template_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as a template sees it in transformers: keys whose value is None left out, and reasoning
    under any of its names also given as `thinking` (first) and `reasoning_content`."""
    if not isinstance(message, Mapping):
        raise TypeError(f"a message must be a mapping (an object), got {type(message).__name__}")
    kept = {key: value for key, value in message.items() if value is not None}
    reasoning = next((kept[key] for key in _REASONING_KEYS if key in kept), None)
    if reasoning is None:
        return kept
    aliased = {"thinking": reasoning}
    aliased.update(kept)
    aliased["reasoning_content"] = reasoning
    return aliased


def file_bytes(location: str) -> bytes | None:
    """The bytes of the file or object at `location` (a path or URL, through the storage seam); None when
    there is none (a directory included)."""
    from meltemi.datastore.errors import StorageError
    from meltemi.datastore.storage import read_object

    try:
        return read_object(location)
    except StorageError as e:
        raise ChatTemplateError(f"{location}: cannot be read ({e})") from None


def _beside(location: str, name: str) -> str:
    """The file `name` in the directory (or bucket prefix) that holds `location`."""
    parent, slash, _ = location.rstrip("/").rpartition("/")
    return f"{parent}{slash}{name}" if slash else name


def _decoded(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ChatTemplateError(f"{what}: not UTF-8 text (byte {e.start})") from None


def _read_text(location: str, what: str) -> str:
    data = file_bytes(location)
    if data is None:
        raise ChatTemplateError(f"{what}: no such file")
    return _decoded(data, what)


def _read_config(path: str) -> dict[str, Any]:
    return _parse_config(_read_text(path, f"tokenizer configuration {path}"), path)


def _parse_config(text: str | bytes, path: str) -> dict[str, Any]:
    if isinstance(text, bytes):
        text = _decoded(text, f"tokenizer configuration {path}")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChatTemplateError(f"{path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(config, dict):
        raise ChatTemplateError(f"{path}: not a JSON object")
    return config


def _configured_template(config: Mapping[str, Any], path: str) -> str:
    """The configuration's `chat_template`: a string, or the one named `default` of a list of them."""
    found = config.get("chat_template")
    if found is None:
        raise ChatTemplateError(f"{path}: no chat_template (and no chat_template.jinja beside it)")
    if isinstance(found, str):
        return found
    named = {}
    if isinstance(found, list):
        named = {t.get("name"): t.get("template") for t in found if isinstance(t, dict)}
    if not isinstance(named.get("default"), str):
        names = ", ".join(str(name) for name in named) or "none"
        raise ChatTemplateError(
            f"{path}: chat_template is neither a string nor a list of named templates with one named "
            f"'default' (names: {names})"
        )
    return named["default"]


def _special_tokens(config: Mapping[str, Any], path: str) -> dict[str, str]:
    """The special tokens transformers gives a template from a configuration: the named ones, any other
    `*_token` holding a token, and `extra_special_tokens` when it names its tokens."""
    extra = config.get("extra_special_tokens")
    candidates = dict(extra) if isinstance(extra, dict) else {}
    candidates |= {k: v for k, v in config.items() if k in _SPECIAL_NAMES or k.endswith("_token")}
    tokens = {}
    for name, value in candidates.items():
        if isinstance(value, dict) and "content" in value:
            value = value["content"]
        if isinstance(value, str):
            tokens[name] = value
        elif value is not None and name in _SPECIAL_NAMES:
            raise ChatTemplateError(f"{path}: {name} is {type(value).__name__}, not a token")
    return tokens
