"""The tokenizer files of a Hugging Face directory: ``tokenizer.json`` as trained, and the two small files
that tell ``AutoTokenizer`` which of its special tokens ends a document and, for a chat model, its chat
template (``chat_template`` in ``tokenizer_config.json``, with the special tokens it renders, such as
``bos_token``); a chat model's ``eos_token`` is its end-of-turn token, where a reply stops.

>>> import tempfile
>>> from meltemi.datastore import corpora
>>> from meltemi.datastore.corpora import python_stdlib
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> path = corpora.train_tokenizer(sorted(python_stdlib())[:3], 300, out / "t.json")
>>> hf = Directory("memory://doc/tokenizer/hf")
>>> special = write_tokenizer_files(path, hf, model_max_length=64)
>>> special.eos_token, special.eos_token_id is not None, hf.list()
('<|endoftext|>', True, ['special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json'])
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from meltemi.datastore.storage import Directory, Location, read_object
from meltemi.trainer.data.run_tokenizer import end_of_text, tokenizer_at
from meltemi.trainer.hf.config_map import HfFormatError

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe


@dataclasses.dataclass(frozen=True)
class SpecialTokens:
    """The end-of-text token (and its id) a checkpoint's generation stops at (None when there is none), and
    the beginning-of-text token a chat template starts with (None when it names none)."""

    eos_token: str | None
    eos_token_id: int | None
    bos_token: str | None = None
    bos_token_id: int | None = None


def special_tokens(
    tokenizer_path: str | os.PathLike | Location, eos_token: str | None = None
) -> SpecialTokens:
    """``eos_token`` (checked to exist), or the run's end-of-text rule (``run_tokenizer.end_of_text``)."""
    return _special_tokens(tokenizer_at(tokenizer_path, HfFormatError), eos_token, str(tokenizer_path))


def _special_tokens(tokenizer: Tokenizer, eos_token: str | None, where: str) -> SpecialTokens:
    if eos_token is not None:
        token_id = tokenizer.token_to_id(eos_token)
        if token_id is None:
            raise HfFormatError(f"{where}: the eos token {eos_token!r} is not in the vocabulary")
        return SpecialTokens(eos_token, token_id)
    found = end_of_text(tokenizer)
    return SpecialTokens(found.token, found.id)


def write_tokenizer_files(
    tokenizer_path: str | os.PathLike | Location,
    out: Directory,
    *,
    model_max_length: int,
    eos_token: str | None = None,
    chat: ChatRecipe | None = None,
) -> SpecialTokens:
    """Copy ``tokenizer.json`` (a path or URL) into ``out`` (a local directory or a bucket prefix) with
    ``tokenizer_config.json`` and ``special_tokens_map.json``; return the end-of-text token they name. With
    ``chat`` (a chat run's recipe), ``tokenizer_config.json`` also holds its template (``chat_template``)
    and the special tokens the template renders (``bos_token``; ``eos_token`` is ``eos_token``, the end of
    a turn)."""
    tokenizer = tokenizer_at(tokenizer_path, HfFormatError)
    special = _special_tokens(tokenizer, eos_token, str(tokenizer_path))
    out.write_bytes("tokenizer.json", read_object(tokenizer_path))
    named = {} if chat is None else chat.template.special_tokens
    tokens = {k: v for k, v in named.items() if k != "eos_token"}
    tokens |= {} if special.eos_token is None else {"eos_token": special.eos_token}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        **tokens,
        **({} if chat is None else {"chat_template": chat.template.text}),
    }
    out.write_text("tokenizer_config.json", json.dumps(config, indent=2) + "\n")
    out.write_text("special_tokens_map.json", json.dumps(tokens, indent=2) + "\n")
    bos = tokens.get("bos_token")
    bos_id = None if bos is None else tokenizer.token_to_id(bos)
    return dataclasses.replace(special, bos_token=bos, bos_token_id=bos_id)
