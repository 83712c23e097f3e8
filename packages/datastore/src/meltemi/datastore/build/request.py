"""One build as the user asked for it, and its command-line flags: the one place that knows both.

`cli.py` makes its `build` arguments from `BUILD_FLAGS`, and a build writes the command that resumes it
from the same table, so a new option is added once. Errors carry their remedies as data (`errors.Remedy`):
`str(error)` names these flags, and a program calling `build_store` words them with its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from meltemi.datastore.build.inputs.sources import INVALID_UTF8, InvalidUtf8, ReadPolicy, redact
from meltemi.datastore.build.records import BuildOptions
from meltemi.datastore.chat.options import LOSS_ON, OVERLONG, SHIPPED_TEMPLATE, LossOn, Overlong
from meltemi.datastore.layout import DEFAULT_CHUNK_TOKENS, DEFAULT_SHARD_TOKENS, default_shard_tokens

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

UNIT_BYTES = 4 << 20
FORMATS = ("text", "chat")
CHAT_FIELD = "messages"
CHAT_OPTIONS = (
    "chat_template",
    "loss_on",
    "max_tokens",
    "overlong",
    "end_of_turn",
)  # what only a chat build reads


@dataclass(frozen=True)
class BuildRequest:
    """`build_store`'s arguments (paths as strings), checked; `options` are those that decide the bytes."""

    inputs: tuple[str, ...]
    tokenizer: str
    out: str
    text_field: str = "text"
    workers: int = 1
    eos: bool = True
    eos_token: str | None = None
    overwrite: bool = False
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    shard_tokens: int | None = None
    unit_bytes: int = UNIT_BYTES
    skip_bad_lines: bool = False
    invalid_utf8: InvalidUtf8 = "error"
    format: Literal["text", "chat"] = "text"
    chat_template: str = SHIPPED_TEMPLATE
    loss_on: LossOn = "assistant"
    max_tokens: int | None = None
    overlong: Overlong = "truncate"
    end_of_turn: str | None = None
    split: str | None = None
    subset: str | None = None
    cluster: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.invalid_utf8 not in INVALID_UTF8:
            choices = ", ".join(repr(c) for c in INVALID_UTF8)
            raise ValueError(f"invalid_utf8 must be one of {choices}, got {self.invalid_utf8!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.chunk_tokens < 1 or self.unit_bytes < 1:
            raise ValueError(
                f"chunk_tokens and unit_bytes must be positive, got {self.chunk_tokens}, {self.unit_bytes}"
            )
        chat_only = [name for name in CHAT_OPTIONS if getattr(self, name) != _DEFAULTS[name]]
        if self.format == "text" and chat_only:
            flags = ", ".join(_BY_FIELD[name].spelling for name in chat_only)
            raise ValueError(
                f"{', '.join(chat_only)} ({flags}): options of a chat store, and this build is text; "
                "build a chat store with format='chat' (--format chat)"
            )
        shard = self.options().shard_tokens
        if shard < self.chunk_tokens or shard % self.chunk_tokens:
            raise ValueError(
                f"shard_tokens must be a positive multiple of chunk_tokens ({self.chunk_tokens}), got {shard}"
            )

    def options(self, chat: ChatRecipe | None = None) -> BuildOptions:
        """The options that decide the store's bytes (a chat store's: with `chat`, its recipe's)."""
        shard = default_shard_tokens(self.chunk_tokens) if self.shard_tokens is None else self.shard_tokens
        identity = None if chat is None else chat.identity()
        eos = self.eos and chat is None  # a chat template ends each turn itself
        return BuildOptions(self.field, eos, self.chunk_tokens, shard, self.unit_bytes, identity)

    @property
    def field(self) -> str:
        """The JSONL field or Parquet column read: `text_field`, whose default for chat is `messages`."""
        return CHAT_FIELD if self.format == "chat" and self.text_field == "text" else self.text_field

    def chat_recipe(self) -> ChatRecipe | None:
        """How a chat store is made (its template loaded), or None for a text store."""
        if self.format != "chat":
            return None
        from meltemi.datastore.chat.recipe import ChatRecipe, load_template  # Jinja, only for a chat store

        template = load_template(self.chat_template)
        return ChatRecipe(template, self.loss_on, self.max_tokens, self.overlong, self.end_of_turn)

    def reading(self) -> ReadPolicy:
        """How this build reads documents.

        >>> BuildRequest(("a.jsonl",), "t.json", "s", invalid_utf8="skip").reading().invalid_utf8
        'skip'
        """
        return ReadPolicy(self.field, self.skip_bad_lines, self.invalid_utf8)

    def command(self, **changes: Any) -> str:
        """The command line that runs this build (with `changes`), credentials in URLs masked.

        >>> BuildRequest(("a.jsonl",), "tok.json", "store", workers=4).command(skip_bad_lines=True)
        'python -m meltemi.datastore build --input a.jsonl --tokenizer tok.json --out store --workers 4
        --skip-bad-lines'
        """
        request = dataclasses.replace(self, **changes)
        words = ["python", "-m", "meltemi.datastore", "build"]
        for flag in BUILD_FLAGS:
            if flag.resumes:
                words += flag.words(getattr(request, flag.field), _DEFAULTS.get(flag.field))
        return shlex.join(redact(word) for word in words)


@dataclass(frozen=True)
class Flag:
    """One `build` flag: the `BuildRequest` field it sets, how it is spelled, and its help."""

    field: str
    help: str
    kind: Literal["text", "int", "many", "switch", "on_off", "choice"] = "text"
    option: str | None = None
    metavar: str | None = None
    resumes: bool = True  # part of the command that resumes a half-built store
    choices: tuple[str, ...] = ()

    @property
    def spelling(self) -> str:
        return self.option or "--" + self.field.replace("_", "-")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        required = self.field not in _DEFAULTS
        settings: dict[str, Any] = {"dest": self.field, "help": self.help}
        if self.kind == "switch":
            settings["action"] = "store_true"
        elif self.kind == "on_off":
            settings |= {"action": argparse.BooleanOptionalAction, "default": _DEFAULTS[self.field]}
        else:
            settings |= {"metavar": self.metavar, "required": required}
            settings |= {"type": int} if self.kind == "int" else {}
            settings |= {"nargs": "+"} if self.kind == "many" else {}
            settings |= {"choices": self.choices} if self.kind == "choice" else {}
            settings |= {} if required else {"default": _DEFAULTS[self.field]}
        parser.add_argument(self.spelling, **settings)

    def words(self, value: Any, default: Any) -> list[str]:
        """How `value` is said on a command line: nothing when it is the default."""
        if self.field in _DEFAULTS and value == default:
            return []
        return self.say(value)

    def say(self, value: Any) -> list[str]:
        """`value` on a command line, even when it is the default."""
        if self.kind == "many":
            return [self.spelling, *value]
        if self.kind == "switch":
            return [self.spelling]
        if self.kind == "on_off":
            return [self.spelling if value else "--no-" + self.spelling.removeprefix("--")]
        return [self.spelling, str(value)]


BUILD_FLAGS = (
    Flag("inputs", "files, directories, globs or URLs", "many", "--input", "PATH_OR_GLOB_OR_URL"),
    Flag("tokenizer", "a Hugging Face tokenizer.json (path or URL)", metavar="TOKENIZER_JSON"),
    Flag("out", "the store's directory", metavar="DIR"),
    Flag("text_field", "JSONL field / Parquet column holding the text"),
    Flag("workers", "tokenizer processes (the result is the same)", "int"),
    Flag(
        "cluster",
        "build on the Ray cluster at ADDRESS (auto: the one `ray start` made here; or the head's HOST:PORT): "
        "its nodes tokenize and assemble, writing into the output (a bucket, or a disk they all mount); "
        "the result is the same",
        option="--ray",
        metavar="ADDRESS",
    ),
    Flag("eos", "an end-of-document token after each document", "on_off"),
    Flag("eos_token", "the EOS token's text (default: found in the tokenizer)"),
    Flag("overwrite", "rebuild even if the inputs changed", "switch", resumes=False),
    Flag("chunk_tokens", "tokens per checksummed chunk", "int"),
    Flag(
        "shard_tokens",
        f"tokens per shard file, a multiple of --chunk-tokens (default: about {DEFAULT_SHARD_TOKENS:,})",
        "int",
    ),
    Flag("unit_bytes", "input bytes per unit of work", "int"),
    Flag(
        "skip_bad_lines",
        "skip JSONL lines that are not a JSON object with the text field (counted and named in the manifest)",
        "switch",
    ),
    Flag(
        "invalid_utf8",
        "a document (text file, JSONL line, Parquet row) that is not UTF-8: stop at it naming it (error, the "
        "default), leave it out (skip) or replace its bad bytes with U+FFFD (replace); counted",
        "choice",
        choices=INVALID_UTF8,
    ),
    Flag(
        "format",
        "text (documents) or chat (conversations: JSONL lines or Parquet rows with a messages list, or a "
        "prompt and a completion)",
        "choice",
        choices=FORMATS,
    ),
    Flag(
        "chat_template",
        f"chat: {SHIPPED_TEMPLATE} (shipped, Llama 3's layout), a .jinja file, or a tokenizer "
        "directory or its "
        "tokenizer_config.json",
        metavar="TEMPLATE",
    ),
    Flag(
        "loss_on",
        "chat: train on the assistant's tokens (assistant) or on every token (all)",
        "choice",
        choices=LOSS_ON,
    ),
    Flag("max_tokens", "chat: the longest conversation kept, in tokens (default: any)", "int"),
    Flag(
        "overlong",
        "chat: a conversation over --max-tokens is cut to it (truncate) or left out (drop); counted",
        "choice",
        choices=OVERLONG,
    ),
    Flag(
        "end_of_turn",
        "chat: the token each assistant turn ends with, trained so that a model learns to stop (default: the "
        "template's eos_token, else <|eot_id|>)",
        metavar="TOKEN",
    ),
    Flag(
        "split",
        "the split of a data set's directory to read, as its card or file names name it (default: its train "
        "split)",
        metavar="SPLIT",
    ),
    Flag(
        "subset",
        "the subset of a data set's directory to read, as the configs of its README.md name it "
        "(load_dataset's name; default: the one its card marks default)",
        metavar="NAME",
    ),
)
_BY_FIELD = {flag.field: flag for flag in BUILD_FLAGS}


_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(BuildRequest) if f.default is not dataclasses.MISSING
}
