"""How many bytes of text each token stands for: the denominator of bits per byte.

Bits per byte compares models across tokenizers: the summed loss in bits over the bytes of the text the
targets spell. For byte-level BPE tokenizers (GPT-2, Llama 3, ours) a token's string maps back to bytes
exactly; for others the token is decoded alone and its UTF-8 length taken. Special tokens count 0 bytes.
"""

import json
import os

import numpy as np
from tokenizers import Tokenizer

from meltemi.datastore.tokenizer_file import load_tokenizer


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet's character for each byte (GPT-2's printable remapping), inverted."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)}
    printable |= set(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def _is_byte_level(tokenizer: Tokenizer) -> bool:
    spec = json.loads(tokenizer.to_str())
    decoder = spec.get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
    return "ByteLevel" in kinds


def token_byte_lengths(tokenizer: str | os.PathLike | Tokenizer) -> np.ndarray:
    """An int32 array, indexed by token id, of the bytes each token spells (special tokens: 0); `tokenizer`
    parsed, or a `tokenizer.json`'s path or URL.

    >>> import tempfile
    >>> from meltemi.datastore import corpora
    >>> path = corpora.train_tokenizer(corpora.python_stdlib()[:3], 300, tempfile.mkdtemp() + "/t.json")
    >>> lengths = token_byte_lengths(path)
    >>> tok = Tokenizer.from_file(path)
    >>> ids = tok.encode("def f(x):\\n    return x").ids
    >>> int(lengths[ids].sum()) == len("def f(x):\\n    return x".encode())
    True
    """
    if not isinstance(tokenizer, Tokenizer):
        tokenizer = load_tokenizer(tokenizer)
    special = {i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    lengths = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), np.int32)
    alphabet = _byte_level_alphabet() if _is_byte_level(tokenizer) else None
    for text, i in tokenizer.get_vocab(with_added_tokens=True).items():
        if i in special:
            continue
        if alphabet is not None and all(c in alphabet for c in text):
            lengths[i] = len(text)
        else:
            lengths[i] = len(tokenizer.decode([i], skip_special_tokens=False).encode("utf-8"))
    return lengths
