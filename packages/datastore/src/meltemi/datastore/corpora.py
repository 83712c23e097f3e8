"""The default corpus for the apps (the running interpreter's standard library) and a BPE trainer for it."""

import os
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from meltemi.datastore.build import build_store
from meltemi.datastore.chat_template import CHAT_SPECIAL_TOKENS
from meltemi.datastore.errors import DatastoreError, InputError
from meltemi.datastore.store import TokenStore

EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS: tuple[str, ...] = (EOS_TOKEN, *CHAT_SPECIAL_TOKENS)
"""`train_tokenizer`'s special tokens, ids 0 to 4: the end of a document, then the chat template's."""
_TEST_DIRS = frozenset({"test", "tests", "idle_test"})
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


def python_stdlib(include_tests: bool = False) -> list[str]:
    """The standard library's `.py` files, sorted by path (site-packages never included).

    The test suites are left out unless asked for: they hold deliberately broken files.

    >>> files = python_stdlib()
    >>> files == sorted(files) and any(f.endswith("/json/__init__.py") for f in files)
    True
    """
    skipped = _PACKAGE_DIRS if include_tests else _PACKAGE_DIRS | _TEST_DIRS
    files = []
    # Pruned while walking: the test suites and site-packages are most of what lies under the root.
    for parent, dirnames, filenames in os.walk(Path(sysconfig.get_paths()["stdlib"])):
        dirnames[:] = [d for d in dirnames if d not in skipped]
        files += [os.path.join(parent, f) for f in filenames if f.endswith(".py")]
    return sorted(files)


def train_tokenizer(
    files: Sequence[str | os.PathLike],
    vocab_size: int,
    out: str | os.PathLike,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
) -> str:
    """Train a byte-level BPE on `files` and write it to `out` (a `tokenizer.json`); returns `out`.

    The same files give the same tokenizer. Its special tokens come first, in order, at ids 0, 1, ...: by
    default `<|endoftext|>`, which ends each document, then the chat template's (`CHAT_SPECIAL_TOKENS`), so
    every build has them at the same ids.

    >>> import tempfile
    >>> path = train_tokenizer(python_stdlib()[:5], 300, tempfile.mkdtemp() + "/tokenizer.json")
    >>> from tokenizers import Tokenizer
    >>> tokenizer = Tokenizer.from_file(path)
    >>> tokenizer.get_vocab_size(), [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|eot_id|>")]
    (300, [0, 4])
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = [os.fspath(f) for f in files]
    if not files:
        raise InputError("train_tokenizer needs at least one file")
    for path in files:
        if not os.path.isfile(path):
            raise InputError(f"train_tokenizer: {path!r}: no such file")
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    special_tokens = list(dict.fromkeys(special_tokens))
    least = len(alphabet) + len(special_tokens)
    if vocab_size < least:
        raise ValueError(
            f"vocab_size must be at least {least} ({len(alphabet)} bytes + {len(special_tokens)} special "
            f"tokens), got {vocab_size}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special_tokens, initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train(sorted(files), trainer)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(os.fspath(out))
    return os.fspath(out)


def stdlib_tokenizer(directory: str | os.PathLike, vocab_size: int) -> str:
    """The standard library's `tokenizer.json` under `directory`, trained on first use (written aside and
    renamed, so a killed training never leaves half a file); the tokenizer of `stdlib_corpus`.

    >>> import tempfile
    >>> directory = tempfile.mkdtemp()
    >>> tokenizer = stdlib_tokenizer(directory, 300)  # doctest: +SKIP
    >>> tokenizer == stdlib_tokenizer(directory, 300) == f"{directory}/tokenizer.json"  # doctest: +SKIP
    True
    """
    root = Path(directory)
    tokenizer = root / "tokenizer.json"
    if not tokenizer.exists():
        root.mkdir(parents=True, exist_ok=True)
        aside = root / f".tokenizer-{os.getpid()}.json"
        train_tokenizer(python_stdlib(), vocab_size, aside)
        os.replace(aside, tokenizer)
    return str(tokenizer)


def stdlib_corpus(directory: str | os.PathLike, vocab_size: int, progress: bool = False) -> tuple[str, str]:
    """`(tokenizer.json, token store)` of the standard library under `directory`, built on first use.

    A later call reuses both; a build that was killed is finished, and a half-written tokenizer is never
    left behind (it is written aside and renamed). The directory should name the vocabulary size and the
    Python version, since both change the result. A module that is not UTF-8 (none is, in CPython's
    library outside its tests) is left out, counted in the store's manifest.

    >>> import tempfile
    >>> tokenizer, store = stdlib_corpus(tempfile.mkdtemp(), 300)  # doctest: +SKIP
    >>> stdlib_corpus(Path(store).parent, 300) == (tokenizer, store)  # doctest: +SKIP
    True
    """
    tokenizer, store = stdlib_tokenizer(directory, vocab_size), Path(directory) / "store"
    try:
        TokenStore.open(store, tokenizer=tokenizer)
    except DatastoreError:  # not built yet, or a build that stopped: (finish) building it
        build_store(python_stdlib(), tokenizer, store, invalid_utf8="skip", progress=progress)
    return tokenizer, str(store)
