"""A completion's text written as it is generated (``generate(..., stream=TextStream(...))``), as chat
programs show a reply: after each compiled chunk of tokens, what the first row's text has gained.

Only text that cannot change is written: nothing after an end-of-text token, no character whose bytes are
not all generated yet (a byte-level tokenizer decodes those as U+FFFD), and no tail that may be the start of
a stop string. ``finish`` then writes the rest of the completion's own text, so that what was written is
exactly ``Completion.text``.

>>> from tokenizers import Tokenizer, decoders, models
>>> tokenizer = Tokenizer(models.WordLevel({"Hi": 0, "there": 1, "<eot>": 2, "END": 3}, unk_token="Hi"))
>>> tokenizer.decoder = decoders.WordPiece()
>>> pieces = []
>>> stream = TextStream(tokenizer, stop_ids=[2], write=pieces.append)
>>> stream([[0]]); stream([[0, 1]]); stream([[0, 1, 2, 0]])
>>> stream.finish("Hi there"); pieces
['Hi', ' there']
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from tokenizers import Tokenizer

from meltemi.trainer.generate.healing import UNFINISHED, after_prefix


class TextStream:
    """Writes the first row's new text through ``write`` as ``generate`` reports its tokens; ``written``
    is everything written so far. The stream stops at any of ``stop_ids`` and before any of
    ``stop_strings``; a healed row's text starts ``after`` the prefix its first token restores."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        stop_ids: Sequence[int] = (),
        stop_strings: Sequence[str] = (),
        write: Callable[[str], object],
        after: str = "",
    ):
        self.tokenizer, self.stop_ids, self.stop_strings = tokenizer, frozenset(stop_ids), tuple(stop_strings)
        self.write, self.after = write, after
        self.written = ""

    def __call__(self, rows: Sequence[Sequence[int]]) -> None:
        """Write what the first row's new tokens, so far, add to the text for sure."""
        tokens = list(rows[0])
        ended = next((i for i, token in enumerate(tokens) if token in self.stop_ids), len(tokens))
        self._advance(self._settled(after_prefix(self.tokenizer.decode(tokens[:ended]), self.after)))

    def finish(self, text: str | None) -> None:
        """Write the rest of the completion's ``text`` (what the last chunk settled)."""
        self._advance(text or "")

    def _settled(self, text: str) -> str:
        for stop in self.stop_strings:
            if stop in text:
                text = text[: text.index(stop)]
        text = text.rstrip(UNFINISHED)
        starts = [k for stop in self.stop_strings for k in range(1, len(stop)) if text.endswith(stop[:k])]
        return text[: len(text) - max(starts, default=0)]

    def _advance(self, text: str) -> None:
        """Write ``text`` beyond what was written, when it continues it (a decoder whose text is not
        prefix-stable writes nothing more until it is)."""
        if len(text) > len(self.written) and text.startswith(self.written):
            self.write(text[len(self.written) :])
            self.written = text


def to_stdout(text: str) -> None:
    """Write ``text`` to standard output at once: a ``write`` for an app whose stdout is the reply."""
    sys.stdout.write(text)
    sys.stdout.flush()
