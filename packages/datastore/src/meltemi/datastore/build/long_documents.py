"""Long documents tokenized in pieces, to the same ids, in bounded memory.

A tokenizer's encoding of one string holds a few hundred bytes per token (offsets, token strings, masks),
so a 19 MB single-line document took about 4 GB to tokenize whole. BPE never merges across the boundaries
its pre-tokenizer draws, and a regex pre-tokenizer such as byte-level BPE's draws them from the text
around each point alone, so a long document cut at such a boundary and tokenized piece by piece gives the
ids of the whole, piece after piece. A cut is chosen where the pre-tokenizer splits a short window around
it, away from the window's edges (where the window lacks the context the whole has), never inside an added
token (which the tokenizer matches before pre-tokenizing). Only pre-tokenizers that act on the text alone
are cut (regex splits, digits, punctuation, whitespace, byte-level without a prefix space); a tokenizer with
a normalizer, a piece-start rule (SentencePiece's Metaspace, a prefix space) or added tokens that strip
their neighbours' whitespace is tokenized whole.

>>> import tempfile
>>> from tokenizers import Tokenizer
>>> from meltemi.datastore import corpora
>>> tokenizer = Tokenizer.from_file(corpora.train_tokenizer(corpora.python_stdlib()[:5], 400,
...                                                         tempfile.mkdtemp() + "/t.json"))
>>> text = "def f(x):\\n    return x + 1\\n" * 500
>>> pieces = pieces_of(tokenizer, text, size=1_000)
>>> len(pieces) > 10 and "".join(pieces) == text
True
>>> ids = [i for piece in pieces for i in tokenizer.encode(piece, add_special_tokens=False).ids]
>>> ids == tokenizer.encode(text, add_special_tokens=False).ids
True
"""

from __future__ import annotations

import json

from tokenizers import Tokenizer

PIECE_CHARACTERS = 1 << 18  # about the characters of a piece: its encoding takes tens of MB, not GB
WINDOW = 256  # characters on each side of a cut the pre-tokenizer reads to place it


def pieces_of(tokenizer: Tokenizer, text: str, size: int | None = None) -> list[str]:
    """``text`` as consecutive pieces of about ``size`` characters (`PIECE_CHARACTERS` by default), cut where
    tokenizing the pieces one by one gives the ids of the whole; ``[text]`` when it is short or the
    tokenizer cannot be cut safely."""
    size = size or PIECE_CHARACTERS
    if len(text) <= size or not _cuttable(tokenizer):
        return [text]
    added = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.content]
    pieces, start = [], 0
    while len(text) - start > size + WINDOW:
        places = range(start + size, len(text) - WINDOW, max(1, size // 2))  # further on when none is near
        near = (_cut_near(tokenizer, text, at, added) for at in places)
        cut = next((c for c in near if c is not None and c > start), None)
        if cut is None:
            break
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _cuttable(tokenizer: Tokenizer) -> bool:
    """Whether ``tokenizer`` splits by the text alone, so that its pieces encode as the whole."""
    if tokenizer.normalizer is not None or tokenizer.pre_tokenizer is None:
        return False
    if any(t.lstrip or t.rstrip for t in tokenizer.get_added_tokens_decoder().values()):
        return False
    return _local(json.loads(tokenizer.pre_tokenizer.__getstate__()))


LOCAL_PRE_TOKENIZERS = {"Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"}


def _local(spec: dict) -> bool:
    """Whether a serialized pre-tokenizer splits by the text alone, with nothing added at a piece's start."""
    kind = spec.get("type")
    if kind == "Sequence":
        return all(_local(part) for part in spec.get("pretokenizers", []))
    if kind == "ByteLevel":
        return not spec.get("add_prefix_space", False)
    return kind in LOCAL_PRE_TOKENIZERS


def _cut_near(tokenizer: Tokenizer, text: str, at: int, added: list[str]) -> int | None:
    """A pre-token boundary of ``text`` near ``at``: drawn in the middle half of a window around it (so its
    context is the whole's), not inside an added token; None when there is none."""
    first = max(0, at - WINDOW)
    splits = tokenizer.pre_tokenizer.pre_tokenize_str(text[first : at + WINDOW])
    starts = [first + start for _, (start, _) in splits]
    inner = [s for s in starts if at - WINDOW // 2 <= s <= at + WINDOW // 2 and not _inside(text, s, added)]
    return min(inner, key=lambda s: abs(s - at)) if inner else None


def _inside(text: str, cut: int, added: list[str]) -> bool:
    """Whether an occurrence of one of the ``added`` tokens spans the position ``cut``."""
    for token in added:
        low = max(0, cut - len(token) + 1)
        region = text[low : cut + len(token) - 1]
        found = region.find(token)
        while found >= 0:
            if low + found < cut < low + found + len(token):
                return True
            found = region.find(token, found + 1)
    return False
