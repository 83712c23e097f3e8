"""A run's chat data, made concrete: the chat template it renders with, and a tokenizer that writes each of
the template's special tokens as one token.

A tokenizer that lacks them (a base pretrained before chat, a Hugging Face base tokenizer) gets them
appended as special tokens, after its last id, so every id it had keeps its meaning; the extended copy is
kept under ``data.cache_dir`` named by the original's hash and the tokens added, so a rerun (a resume)
finds the same file. The model's vocabulary then grows by as many rows (their start:
``meltemi.trainer.phase.vocabulary``).

>>> import tempfile
>>> from meltemi.datastore import corpora
>>> from tokenizers import Tokenizer, models
>>> plain = Path(tempfile.mkdtemp()) / "plain.json"
>>> Tokenizer(models.BPE()).save(str(plain))
>>> extended = chat_tokenizer(str(plain), load_chat_template("llama3"), tempfile.mkdtemp())
>>> extended.added, extended.vocab_size
(('<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'), 4)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer

from meltemi.datastore import DatastoreError
from meltemi.datastore.build.request import SHIPPED_TEMPLATE
from meltemi.datastore.storage import Directory
from meltemi.trainer.data.run_tokenizer import tokenizer_bytes
from meltemi.trainer.errors import ConfigError

AUTO_TEMPLATE = "auto"  # data.chat.template: the base's own template, else the shipped one

if TYPE_CHECKING:  # the template engine is imported by the runs that render chats, not by every run
    from meltemi.datastore.chat.template import ChatTemplate


@dataclasses.dataclass(frozen=True)
class ChatRecord:
    """A chat run's template as its checkpoints keep it: the Jinja text and its special tokens (what the
    export writes into ``tokenizer_config.json`` and chat sampling renders with), and the tokens the run's
    tokenizer gained for it (their embedding rows grew from the base's mean)."""

    template: str
    special_tokens: dict[str, str]
    added_tokens: tuple[str, ...] = ()

    def chat_template(self, source: str = "the run's checkpoint") -> ChatTemplate:
        from meltemi.datastore.chat.template import ChatTemplate

        return ChatTemplate(self.template, source, dict(self.special_tokens))

    @staticmethod
    def from_json(raw: dict) -> ChatRecord:
        return ChatRecord(raw["template"], dict(raw["special_tokens"]), tuple(raw.get("added_tokens", ())))


def concrete_template(spec: str, base_template: str | None = None) -> str:
    """``data.chat.template`` made concrete: ``auto`` is the base's own template (``base_template``, as
    ``data.chat.template`` names it) when the base has one, else the shipped ``llama3``.

    >>> concrete_template("auto", "hf/qwen"), concrete_template("auto"), concrete_template("my.jinja", "hf/q")
    ('hf/qwen', 'llama3', 'my.jinja')
    """
    if spec != AUTO_TEMPLATE:
        return spec
    return SHIPPED_TEMPLATE if base_template is None else base_template


def load_chat_template(spec: str) -> ChatTemplate:
    """``data.chat.template``'s template (``auto`` being the shipped one, as for a run without a base); a
    ``ConfigError`` naming the field when it cannot be read."""
    from meltemi.datastore.chat.recipe import load_template

    try:
        return load_template(concrete_template(spec))
    except DatastoreError as e:
        raise ConfigError(f"data.chat.template: {e}") from None


def recorded_template(record: ChatRecord, named: str | None, cache_dir: str | os.PathLike) -> str:
    """A template a run's checkpoint recorded, as ``data.chat.template`` names it: as the run ``named`` it
    when that still reads as the same template (so a resumed run records the config an uninterrupted one
    does), else a tokenizer directory under ``cache_dir/templates`` (named by the record's hash) whose
    ``tokenizer_config.json`` holds the template and its special tokens, written once; so a run resumes with
    the template it trained with, whether or not the file or base it came from is still there.

    >>> import tempfile
    >>> from meltemi.datastore.chat.recipe import load_template
    >>> record = ChatRecord("{{ bos_token }}{{ messages[0].content }}", {"bos_token": "<s>"})
    >>> template = load_template(recorded_template(record, "/gone/chat.jinja", tempfile.mkdtemp()))
    >>> template.render([{"role": "user", "content": "Hi"}]).text
    '<s>Hi'
    """
    from meltemi.datastore.chat.recipe import load_template
    from meltemi.datastore.chat.template import TOKENIZER_CONFIG

    if named is not None and named != AUTO_TEMPLATE:
        try:
            same = load_template(named)
        except DatastoreError:
            same = None
        if same is not None and (same.text, same.special_tokens) == (record.template, record.special_tokens):
            return named

    text = json.dumps({"chat_template": record.template, **record.special_tokens}, indent=1, sort_keys=True)
    directory = Directory(Path(cache_dir) / "templates" / hashlib.sha256(text.encode()).hexdigest()[:16])
    if directory.read_bytes(TOKENIZER_CONFIG) != text.encode():
        directory.write_text(TOKENIZER_CONFIG, text)
    return directory.where()


def template_tokens(template: ChatTemplate) -> tuple[str, ...]:
    """The tokens the template writes whole: the Llama 3 layout's that it writes or names (in the order the
    stdlib tokenizer reserves them), then its other special tokens (``bos_token``, ``eos_token``, ...)."""
    from meltemi.datastore.chat.template import CHAT_SPECIAL_TOKENS

    named = list(template.special_tokens.values())
    known = [token for token in CHAT_SPECIAL_TOKENS if token in template.text or token in named]
    return tuple(dict.fromkeys([*known, *named]))


@dataclasses.dataclass(frozen=True)
class ChatTokenizer:
    """The tokenizer a chat run uses: ``path``, its ``vocab_size`` (added tokens included) and the tokens it
    gained (none when the original had them all)."""

    path: str
    vocab_size: int
    added: tuple[str, ...]


def chat_tokenizer(
    tokenizer: str, template: ChatTemplate, cache_dir: str | os.PathLike, end_of_turn: str | None = None
) -> ChatTokenizer:
    """``tokenizer`` when it has every token of ``template`` (and ``end_of_turn``, when named) as one token,
    else an extended copy (written once under ``cache_dir/tokenizers``) with the missing ones appended as
    special tokens."""
    data = tokenizer_bytes(tokenizer)
    try:
        parsed = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # tokenizers raises a bare Exception for what it cannot parse
        raise ConfigError(f"data.tokenizer: {tokenizer} is not a tokenizer.json ({error})") from None
    wanted = dict.fromkeys([*template_tokens(template), *([end_of_turn] if end_of_turn else [])])
    missing = tuple(t for t in wanted if parsed.token_to_id(t) is None)
    if not missing:
        return ChatTokenizer(tokenizer, parsed.get_vocab_size(with_added_tokens=True), ())
    parsed.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    key = hashlib.sha256(data + "\0".join(missing).encode()).hexdigest()[:16]
    name = f"{Path(tokenizer).stem}-chat-{key}.json"
    directory = Directory(Path(cache_dir) / "tokenizers")
    text = parsed.to_str()
    if directory.read_bytes(name) != text.encode():
        directory.write_text(name, text)  # one atomic write: a concurrent or killed run leaves it whole
    return ChatTokenizer(directory.where(name), parsed.get_vocab_size(with_added_tokens=True), missing)
