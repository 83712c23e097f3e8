"""A run's chat data, made concrete: the recipe its chat stores are built with (``data.chat`` resolved once
into the datastore's ``ChatRecipe``: the template, the end of a turn, what is trained and how long a
conversation may be), and a tokenizer that writes each of the template's special tokens as one token.

A tokenizer that lacks them (a base pretrained before chat, a Hugging Face base tokenizer) gets them
appended as special tokens, after its last id, so every id it had keeps its meaning; the extended copy is
kept under ``data.cache_dir`` named by the original's hash and the tokens added, so a rerun (a resume)
finds the same file. The model's vocabulary then grows by as many rows (their start:
``meltemi.trainer.phase.vocabulary``).

>>> import tempfile
>>> from meltemi.trainer.config import RunConfig
>>> from tokenizers import Tokenizer, models
>>> plain = Path(tempfile.mkdtemp()) / "plain.json"
>>> Tokenizer(models.BPE()).save(str(plain))
>>> recipe = chat_recipe(RunConfig())
>>> recipe.template.source, recipe.max_tokens
('the shipped llama3 template', 2049)
>>> extended = chat_tokenizer(str(plain), recipe, tempfile.mkdtemp())
>>> extended.added, extended.vocab_size
(('<|begin_of_text|>', '<|start_header_id|>', '<|end_header_id|>', '<|eot_id|>'), 4)
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import AddedToken, Tokenizer

from meltemi.datastore import DatastoreError
from meltemi.datastore.chat.options import SHIPPED_TEMPLATE
from meltemi.datastore.storage import Directory
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_tokenizer import tokenizer_bytes
from meltemi.trainer.errors import ConfigError

AUTO_TEMPLATE = "auto"  # data.chat.template: the base's own template, else the shipped one

if TYPE_CHECKING:  # the template engine is imported by the runs that render chats, not by every run
    from meltemi.datastore.chat.recipe import ChatRecipe
    from meltemi.datastore.chat.template import ChatTemplate


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


def chat_recipe(config: RunConfig) -> ChatRecipe:
    """``data.chat`` as the one recipe a run's chat stores are built with: ``data.chat.template`` loaded
    (once: the stores, the tokenizer and the stores' cache keys all take this object), its end of turn,
    ``loss_on`` and ``overlong``, and the longest conversation a row holds (``data.seq_len`` + 1 tokens)."""
    from meltemi.datastore.chat.recipe import ChatRecipe

    chat = config.data.chat
    template = load_chat_template(chat.template)
    return ChatRecipe(template, chat.loss_on, config.data.seq_len + 1, chat.overlong, chat.end_of_turn)


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


def chat_tokenizer(tokenizer: str, recipe: ChatRecipe, cache_dir: str | os.PathLike) -> ChatTokenizer:
    """``tokenizer`` when it has every token of ``recipe``'s template and its end of turn as one token, else
    an extended copy (written once under ``cache_dir/tokenizers``) with the missing ones appended as
    special tokens."""
    data = tokenizer_bytes(tokenizer)
    try:
        parsed = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as error:  # tokenizers raises a bare Exception for what it cannot parse
        raise ConfigError(f"data.tokenizer: {tokenizer} is not a tokenizer.json ({error})") from None
    wanted = dict.fromkeys([*template_tokens(recipe.template), recipe.turn_end])
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
