"""What using a Hugging Face directory needs besides its weights, read as transformers reads it: the model's
shape (``config.json``), the dtype its weights were saved in (``torch_dtype``), ``tokenizer.json``, the ids
generation stops at (``generation_config.json``'s ``eos_token_id``, else ``config.json``'s) and a chat
model's template (``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``) with the
special tokens it renders.

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.hf.export import export_hf
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> out = export_hf(Llama.init(config, key=jax.random.key(0)), "memory://doc/hf_files", dtype="bfloat16")
>>> files = read_model_files("memory://doc/hf_files")
>>> files.model.hidden_dim, files.dtype, files.tokenizer, files.chat
(32, 'bfloat16', None, None)
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.data.run_tokenizer import EndOfText, end_of_text, tokenizer_at
from meltemi.trainer.hf.config_map import HfFormatError, model_config_from_hf
from meltemi.trainer.hf.load import config_fields, json_file

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

CONFIG, TOKENIZER, TOKENIZER_CONFIG = "config.json", "tokenizer.json", "tokenizer_config.json"
GENERATION_CONFIG = "generation_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where recent transformers save a tokenizer's chat template
DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}  # torch_dtype -> ours


@dataclasses.dataclass(frozen=True)
class HfModelFiles:
    """A Hugging Face directory's model shape, its weights' ``dtype`` (float32 when ``config.json`` names
    none, or one we do not compute in), where its ``tokenizer`` lies (None without ``tokenizer.json``), its
    ``end_of_text`` and, for a chat model, its recipe (``chat``: its template, whose ``eos_token`` ends a
    turn)."""

    model: ModelConfig
    dtype: str
    tokenizer: str | None
    end_of_text: EndOfText
    chat: ChatRecipe | None


def read_model_files(directory: str | os.PathLike | Location | Directory) -> HfModelFiles:
    """The ``HfModelFiles`` of a Hugging Face directory (a path or a bucket URL, read in place); an
    ``HfFormatError`` naming the file that cannot be read as transformers writes it."""
    directory = directory if isinstance(directory, Directory) else Directory(directory)
    fields = config_fields(directory)
    model = model_config_from_hf(fields, where=directory.where(CONFIG))
    dtype = DTYPES.get(str(fields.get("torch_dtype", fields.get("dtype"))), "float32")
    tokenizer = directory.where(TOKENIZER) if directory.exists(TOKENIZER) else None
    tokenizer_config = json_file(directory, TOKENIZER_CONFIG) or {}
    chat = _chat(directory, tokenizer_config)
    generation = json_file(directory, GENERATION_CONFIG) or {}
    named_in = GENERATION_CONFIG if "eos_token_id" in generation else CONFIG
    ids = _ids(
        (generation if named_in == GENERATION_CONFIG else fields).get("eos_token_id"),
        directory.where(named_in),
    )
    return HfModelFiles(model, dtype, tokenizer, _end_of_text(tokenizer, ids, chat), chat)


def _ids(value: Any, where: str) -> tuple[int, ...]:
    """``eos_token_id`` as the ids it names (one id or a list of them; none when unset)."""
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise HfFormatError(f"{where}: eos_token_id is {value!r}, not a token id or a list of them")
    return tuple(values)


def _chat(directory: Directory, tokenizer_config: dict[str, Any]) -> ChatRecipe | None:
    """The directory's chat template and the special tokens it may render, read as transformers reads them
    (the datastore's ``ChatTemplate.from_tokenizer_config``), as a recipe; None when it has no template."""
    from meltemi.datastore.chat.recipe import ChatRecipe
    from meltemi.datastore.chat.template import ChatTemplate
    from meltemi.datastore.errors import ChatTemplateError

    if not has_chat_template(directory, tokenizer_config):
        return None
    try:
        template = ChatTemplate.from_tokenizer_config(directory.where())
    except ChatTemplateError as error:
        raise HfFormatError(str(error)) from None
    return ChatRecipe(template)


def has_chat_template(directory: Directory, tokenizer_config: dict[str, Any] | None = None) -> bool:
    """Whether a Hugging Face directory has a chat template: ``chat_template.jinja``, or a ``chat_template``
    in its ``tokenizer_config.json`` (given when already read)."""
    config = (json_file(directory, TOKENIZER_CONFIG) or {}) if tokenizer_config is None else tokenizer_config
    return "chat_template" in config or directory.exists(CHAT_TEMPLATE_FILE)


def _end_of_text(tokenizer: str | None, ids: tuple[int, ...], chat: ChatRecipe | None) -> EndOfText:
    """The ids generation stops at, the first named by the tokenizer; without any, the run's rule (a chat
    model's end of turn being the token its template ends an assistant's turn with, ``ChatRecipe.turn_end``).
    """
    if not ids:
        turn = None if chat is None else chat.turn_end
        return end_of_text(tokenizer, end_of_turn=turn)
    token = None if tokenizer is None else tokenizer_at(tokenizer, HfFormatError).id_to_token(ids[0])
    return EndOfText(token, ids[0], ids[1:])
