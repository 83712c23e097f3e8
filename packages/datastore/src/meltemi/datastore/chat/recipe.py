"""The recipe a chat store is built with, as one typed object: the template (named once: `load_template`),
the end of a turn, which tokens are trained, and the longest conversation kept with what becomes of a longer
one. Its `identity()` is what decides a store's bytes (a cache of stores is named by `cache_key()`), and
`to_manifest()` is the form a store's manifest records it in, which `from_manifest` reads back (and any
other record of the same form: a trainer's checkpoint keeps it so).

>>> recipe = ChatRecipe(load_template("llama3"), max_tokens=257)
>>> recipe.turn_end, ChatRecipe.from_manifest(recipe.to_manifest(), "m.json") == recipe
('<|eot_id|>', True)
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer

from meltemi.datastore.chat.options import LOSS_ON, OVERLONG, SHIPPED_TEMPLATE, LossOn, Overlong
from meltemi.datastore.chat.template import (
    END_OF_TURN,
    SHIPPED_SOURCE,
    TOKENIZER_CONFIG,
    ChatTemplate,
    file_bytes,
)
from meltemi.datastore.chat.turns import FROM_BEGINNINGS, FROM_BLOCKS, written_end_of_turn
from meltemi.datastore.errors import ChatTemplateError, InputError
from meltemi.datastore.hub_cache import local_or_cached, not_cached
from meltemi.datastore.layout import MANIFEST
from meltemi.datastore.storage import Location

RECORDED = "chat"  # the key of a manifest that records a recipe (a chat store's; a checkpoint's alike)


def load_template(spec: str | os.PathLike) -> ChatTemplate:
    """The chat template `spec` names: `llama3` (the shipped one), a tokenizer directory or its
    `tokenizer_config.json` (its `chat_template` and special tokens), a Jinja file, or a directory whose
    `manifest.json` records a chat recipe (a chat store: the template it was built with); a path, a URL of
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
    directory = text.rstrip("/")
    if file_bytes(f"{directory}/{TOKENIZER_CONFIG}") is not None:
        return ChatTemplate.from_tokenizer_config(text)
    if (recorded := _recorded(f"{directory}/{MANIFEST}")) is not None:
        return recorded.template
    if _is_local_directory(text):
        return ChatTemplate.from_tokenizer_config(text)
    raise ChatTemplateError(
        f"chat template {text!r}: no such file (give {SHIPPED_TEMPLATE}, a .jinja file, a tokenizer "
        f"directory or its tokenizer_config.json, or a chat store){not_cached(text, 'model')}"
    )


def _recorded(manifest: str) -> ChatRecipe | None:
    """The recipe the manifest at `manifest` records; None when there is no such file or it records none."""
    data = file_bytes(manifest)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ChatTemplateError(f"{manifest}: not valid JSON ({e})") from None
    if not isinstance(record, dict) or record.get(RECORDED) is None:
        return None
    return ChatRecipe.from_manifest(record[RECORDED], manifest)


def _is_local_directory(location: str) -> bool:
    local = Location.parse(location).local_path
    return local is not None and local.is_dir()


@dataclass(frozen=True)
class ChatRecipe:
    """How conversations become a chat store's tokens and loss weights: the template (its text, source and
    special tokens), which tokens are trained (`loss_on`), the longest conversation kept (`max_tokens`,
    None: any) with what becomes of a longer one (`overlong`), and `end_of_turn`, the token every assistant
    turn ends with (None: the token the template writes after each assistant message,
    `turns.written_end_of_turn`, else its `eos_token`, else `<|eot_id|>`; `turn_end` says which).

    >>> ChatRecipe(ChatTemplate.llama3(), loss_on="some")
    Traceback (most recent call last):
    ...
    ValueError: loss_on must be one of assistant, all, got 'some'
    """

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

    def to_manifest(self) -> dict[str, Any]:
        """The recipe as a manifest records it (the template whole: a store says how it was made), JSON.

        >>> sorted(ChatRecipe(ChatTemplate.llama3()).to_manifest())[:4]
        ['assistant_tokens', 'end_of_turn', 'loss_on', 'max_tokens']
        """
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

    @classmethod
    def from_manifest(cls, record: Mapping[str, Any], where: str) -> ChatRecipe:
        """The recipe a manifest's record holds (`to_manifest`'s form; what it derives, such as
        `assistant_tokens`, is not read; an end of turn that is the template's own reads as None). A record
        that holds only the template and its special tokens (a checkpoint written before the rest was
        recorded) gets the defaults; the template's source is the one recorded, else `where`, the manifest
        it was read from, which errors name.

        >>> ChatRecipe.from_manifest({"template": "{{ bos_token }}", "special_tokens": {}}, "m.json").turn_end
        '<|eot_id|>'
        >>> ChatRecipe.from_manifest({"template": 1}, "m.json")
        Traceback (most recent call last):
        ...
        meltemi.datastore.errors.ChatTemplateError: m.json: chat.template is int, not a template's text
        """
        if not isinstance(record, Mapping):
            raise ChatTemplateError(f"{where}: chat is {type(record).__name__}, not a recipe's record")
        text = record.get("template")
        if not isinstance(text, str):
            raise ChatTemplateError(f"{where}: chat.template is {type(text).__name__}, not a template's text")
        special = record.get("special_tokens", {})
        if not isinstance(special, Mapping):
            kind = type(special).__name__
            raise ChatTemplateError(f"{where}: chat.special_tokens is {kind}, not an object")
        template = ChatTemplate(text, record.get("template_source") or where, special)
        if record.get("template_sha256", template.sha256) != template.sha256:
            raise ChatTemplateError(f"{where}: chat.template_sha256 is not the hash of chat.template")
        end_of_turn = record.get("end_of_turn")  # recorded whole; None when it is the template's own
        if end_of_turn == cls(template).turn_end:
            end_of_turn = None
        try:
            return cls(
                template,
                record.get("loss_on", "assistant"),
                record.get("max_tokens"),
                record.get("overlong", "truncate"),
                end_of_turn,
            )
        except ValueError as e:
            raise ChatTemplateError(f"{where}: chat: {e}") from None

    def identity(self) -> dict[str, Any]:
        """What decides the store's bytes (a different value, a different store), as a build's plan and
        options record it: `to_manifest`'s record with the template named by its hash, and without its
        source, which only says where the same text came from, nor how the assistant's tokens are found,
        which the template decides.

        >>> sorted(ChatRecipe(ChatTemplate.llama3()).identity())
        ['end_of_turn', 'loss_on', 'max_tokens', 'overlong', 'special_tokens', 'template_sha256']
        """
        record = self.to_manifest()
        del record["template"], record["template_source"], record["assistant_tokens"]
        return record

    def cache_key(self) -> str:
        """`identity()` as one string, the SHA-256 of its canonical JSON: what a cache of chat stores names
        a store by (with the inputs and the tokenizer), so that the same recipe finds the same store.

        >>> ChatRecipe(ChatTemplate.llama3()).cache_key() == ChatRecipe(load_template("llama3")).cache_key()
        True
        """
        canonical = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def options(self) -> tuple[str, LossOn, int | None, Overlong, str | None]:
        """The recipe as `build_store`'s chat options name it (`chat_template`, `loss_on`, `max_tokens`,
        `overlong`, `end_of_turn`): the template by where it came from (`llama3` for the shipped one), so
        that a build's command says how it was made.

        >>> ChatRecipe(ChatTemplate.llama3(), max_tokens=9).options()
        ('llama3', 'assistant', 9, 'truncate', None)
        """
        source = self.template.source
        spec = SHIPPED_TEMPLATE if source == SHIPPED_SOURCE else source
        return spec, self.loss_on, self.max_tokens, self.overlong, self.end_of_turn

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
