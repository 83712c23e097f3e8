"""Token healing: a text prompt's last token taken back when longer tokens begin with its text, and the first
new token made to begin with it.

A byte-level BPE splits ``"def "`` into ``def`` and a lone space, a token that in training follows ``def``
almost never (the space belongs to the name after it: ``def``, `` foo``) but precedes runs of alignment in
tables, so a model continues such a prompt badly. Healed, the prompt is ``def`` and the first new token is
one of those that begin with a space (`` foo``, `` __init__``); the text shown is what follows the prompt as
typed. transformers' ``generate(token_healing=True)`` and guidance do the same.

>>> from tokenizers import Tokenizer, decoders, models
>>> tokenizer = Tokenizer(models.WordLevel({"def": 0, "Ġ": 1, "Ġfoo": 2, "Ġbar": 3, "(": 4}, unk_token="("))
>>> tokenizer.decoder = decoders.ByteLevel()
>>> texts = TokenTexts(tokenizer, 5)
>>> healed = heal_prompt([0, 1], texts)
>>> healed.ids, healed.prefix, texts.starting_with(healed.prefix).tolist()
([0], ' ', [False, True, True, True, False])
>>> heal_prompt([0, 4], texts).ids  # nothing longer begins with "(": kept
[0, 4]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

UNFINISHED = "\ufffd"  # what a byte-level decoder gives for a character whose bytes are not all there


class TokenTexts:
    """Each token id's text (empty for special tokens, and for ids past the tokenizer's vocabulary up to the
    model's ``vocab_size``), decoded once per tokenizer."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int):
        known = min(vocab_size, tokenizer.get_vocab_size(with_added_tokens=True))
        special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
        decoded = tokenizer.decode_batch([[i] for i in range(known)])
        self.texts = [("" if i in special else text) for i, text in enumerate(decoded)]
        self.texts += [""] * (vocab_size - known)

    def starting_with(self, prefix: str) -> np.ndarray:
        """Which ids' texts begin with ``prefix`` (a boolean mask over the vocabulary)."""
        return np.array([text.startswith(prefix) and text != "" for text in self.texts])

    def extended(self, text: str) -> bool:
        """Whether some token's text begins with ``text`` and is longer."""
        return any(len(other) > len(text) and other.startswith(text) for other in self.texts)


@dataclasses.dataclass(frozen=True)
class HealedPrompt:
    """A prompt's tokens to run, and the text its first new token must begin with (empty: none taken
    back)."""

    ids: list[int]
    prefix: str = ""


def heal_prompt(ids: Sequence[int], texts: TokenTexts) -> HealedPrompt:
    """``ids`` without its last token when that token's text is the start of longer tokens' (a special token,
    part of a character, or a prompt of one token is kept)."""
    ids = list(ids)
    if len(ids) < 2:
        return HealedPrompt(ids)
    last = texts.texts[ids[-1]] if ids[-1] < len(texts.texts) else ""
    if not last or UNFINISHED in last or not texts.extended(last):
        return HealedPrompt(ids)
    return HealedPrompt(ids[:-1], last)


def after_prefix(text: str, prefix: str) -> str:
    """``text`` (a healed row's new tokens, decoded) without the ``prefix`` its first token restores: what
    follows the prompt as typed.

    >>> after_prefix(" foo(x)", " "), after_prefix("foo", "")
    ('foo(x)', 'foo')
    """
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text
