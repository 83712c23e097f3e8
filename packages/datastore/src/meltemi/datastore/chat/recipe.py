"""The recipe a chat store is built with: the template (named once: `load_template`), which tokens are
trained, the end of a turn, and what becomes of an overlong conversation.

>>> ChatBuild(load_template("llama3")).turn_end
'<|eot_id|>'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from meltemi.datastore.chat.options import LOSS_ON, OVERLONG, SHIPPED_TEMPLATE, LossOn, Overlong
from meltemi.datastore.chat.template import END_OF_TURN, TOKENIZER_CONFIG, ChatTemplate, file_bytes
from meltemi.datastore.chat.turns import FROM_BEGINNINGS, FROM_BLOCKS, written_end_of_turn
from meltemi.datastore.errors import ChatTemplateError, InputError
from meltemi.datastore.hub_cache import local_or_cached, not_cached
from meltemi.datastore.storage import Location


def load_template(spec: str | os.PathLike) -> ChatTemplate:
    """The chat template `spec` names: `llama3` (the shipped one), a tokenizer directory or its
    `tokenizer_config.json` (its `chat_template` and special tokens), or a Jinja file; a path, a URL of
    the storage seam (a tokenizer directory in a bucket, say), or a model's Hub name in this machine's
    Hugging Face cache (`hub_cache`).

    >>> load_template("llama3").has_generation_blocks
    True
    """
    text = os.fspath(spec)
    if text == SHIPPED_TEMPLATE:
        return ChatTemplate.llama3()
    text = local_or_cached(text, "model")
    if text.rstrip("/").rpartition("/")[2] == TOKENIZER_CONFIG:
        return ChatTemplate.from_tokenizer_config(text)
    if file_bytes(text) is not None:
        return ChatTemplate.from_file(text)
    if file_bytes(f"{text.rstrip('/')}/{TOKENIZER_CONFIG}") is not None or _is_local_directory(text):
        return ChatTemplate.from_tokenizer_config(text)
    raise ChatTemplateError(
        f"chat template {text!r}: no such file (give {SHIPPED_TEMPLATE}, a .jinja file, or a tokenizer "
        f"directory or its tokenizer_config.json){not_cached(text, 'model')}"
    )


def _is_local_directory(location: str) -> bool:
    local = Location.parse(location).local_path
    return local is not None and local.is_dir()


@dataclass(frozen=True)
class ChatBuild:
    """How a chat store is made: the template, which tokens are trained, and the longest conversation kept
    (`max_tokens`, None: any) with what becomes of a longer one. `end_of_turn` is the token every
    assistant turn ends with (default: the token the template writes after each assistant message,
    `turns.written_end_of_turn`, else its `eos_token`, else `<|eot_id|>`)."""

    template: ChatTemplate
    loss_on: LossOn = "assistant"
    max_tokens: int | None = None
    overlong: Overlong = "truncate"
    end_of_turn: str | None = None

    def __post_init__(self) -> None:
        if self.loss_on not in LOSS_ON:
            raise ValueError(f"loss_on must be one of {', '.join(LOSS_ON)}, got {self.loss_on!r}")
        if self.overlong not in OVERLONG:
            raise ValueError(f"overlong must be one of {', '.join(OVERLONG)}, got {self.overlong!r}")
        if self.max_tokens is not None and self.max_tokens < 2:
            raise ValueError(f"max_tokens must be at least 2 (one input, one target), got {self.max_tokens}")
        if self.end_of_turn is not None and not self.end_of_turn:
            raise ValueError("end_of_turn must be a token's text, got an empty string")

    @property
    def turn_end(self) -> str:
        """The end-of-turn token's text."""
        written = None if self.end_of_turn else written_end_of_turn(self.template)
        return self.end_of_turn or written or self.template.special_tokens.get("eos_token") or END_OF_TURN

    @property
    def assistant_tokens(self) -> str:
        """How the assistant's tokens are found (`FROM_BLOCKS` or `FROM_BEGINNINGS`), the reason included."""
        return FROM_BLOCKS if self.template.has_generation_blocks else FROM_BEGINNINGS

    def record(self) -> dict[str, Any]:
        """What a plan and a manifest record of it (the template whole: a store says how it was made)."""
        return {
            "template": self.template.text,
            "template_sha256": self.template.sha256,
            "template_source": self.template.source,
            "special_tokens": dict(self.template.special_tokens),
            "end_of_turn": self.turn_end,
            "loss_on": self.loss_on,
            "assistant_tokens": self.assistant_tokens if self.loss_on == "assistant" else None,
            "max_tokens": self.max_tokens,
            "overlong": self.overlong,
        }

    def identity(self) -> dict[str, Any]:
        """What decides the store's bytes (a different value, a different store): the record with the
        template named by its hash, and without its source, which only says where the same text came from,
        nor how the assistant's tokens are found, which the template decides."""
        record = self.record()
        del record["template"], record["template_source"], record["assistant_tokens"]
        return record

    def check_tokenizer(self, tokenizer: Tokenizer, shown: str) -> int:
        """The end-of-turn token's id; an `InputError` when the tokenizer lacks a token the template writes
        as one (it would be spelled out in pieces, and never learned as a stop)."""
        wanted = [self.turn_end, *self.template.special_tokens.values()]
        missing = [token for token in dict.fromkeys(wanted) if tokenizer.token_to_id(token) is None]
        if missing:
            raise InputError(
                f"tokenizer {shown!r} has no token {', '.join(missing)}, which the chat template "
                f"{self.template.source} writes as one; add them to the tokenizer (the trainer does "
                "so itself)"
            )
        return int(tokenizer.token_to_id(self.turn_end))
