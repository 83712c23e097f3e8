"""A run's tokenizer, kept in the run: a copy in ``<run dir>/tokenizer.json`` whose SHA-256 every checkpoint
records, and the one rule for the token that ends a text (where export says generation stops, and where
sampling stops).

A run directory is then self-contained: export and sampling read the run's copy, from any working
directory, after the original (often under ``.cache``) is gone; a copy that changed since the checkpoint
was written is one clear error.

The end-of-text rule: the token the run's token stores put after every document (their manifests'
``tokenizer.eos_id``; the first source's when they differ), else the first of the datastore's candidates
(``<|endoftext|>``, ``</s>``, ...) the tokenizer has, else none.

>>> import tempfile
>>> from meltemi.datastore import corpora
>>> from meltemi.datastore.corpora import python_stdlib
>>> out = Path(tempfile.mkdtemp())
>>> path = corpora.train_tokenizer(sorted(python_stdlib())[:3], 300, out / "t.json")
>>> end_of_text(path)
EndOfText(token='<|endoftext|>', id=0)
>>> record = copy_into_run(path, out / "run", resumed=False)
>>> run_tokenizer(out / "run", record) == out / "run" / "tokenizer.json"
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer

from meltemi.trainer.errors import CheckpointError, ConfigError, TrainerError

TOKENIZER_FILE = "tokenizer.json"


@dataclasses.dataclass(frozen=True)
class EndOfText:
    """The token that ends a text, and its id; None for both when the tokenizer has none."""

    token: str | None
    id: int | None


@dataclasses.dataclass(frozen=True)
class TokenizerRecord:
    """What a checkpoint records of its run's tokenizer: the copy's file name in the run directory and the
    SHA-256 of its bytes."""

    file: str
    sha256: str


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read(tokenizer: Tokenizer | str | os.PathLike) -> Tokenizer:
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    try:
        return Tokenizer.from_file(os.fspath(tokenizer))
    except Exception as error:  # tokenizers raises a bare Exception for unreadable files
        raise TrainerError(f"{tokenizer}: not a tokenizer.json ({error})") from None


def end_of_text(
    tokenizer: Tokenizer | str | os.PathLike | None, store_eos_ids: Sequence[int | None] = ()
) -> EndOfText:
    """The end-of-text token of a run: the stores' (``store_eos_ids``, each store's recorded ``eos_id``),
    else the first of the datastore's candidates that ``tokenizer`` has, else none."""
    from meltemi.datastore.tokenizing import EOS_CANDIDATES

    recorded = [i for i in store_eos_ids if i is not None]
    vocabulary = None if tokenizer is None else _read(tokenizer)
    if recorded:
        return EndOfText(None if vocabulary is None else vocabulary.id_to_token(recorded[0]), recorded[0])
    if vocabulary is not None:
        for candidate in EOS_CANDIDATES:
            token_id = vocabulary.token_to_id(candidate)
            if token_id is not None:
                return EndOfText(candidate, token_id)
    return EndOfText(None, None)


def copy_into_run(tokenizer: str | os.PathLike, run_dir: Path, *, resumed: bool) -> TokenizerRecord:
    """Copy ``tokenizer`` into ``run_dir`` (written aside, then renamed) and return its record.

    A resumed run whose copy differs from ``tokenizer`` is a ``ConfigError`` (its checkpoints were trained
    with the copy), checked before anything is written."""
    source, target = Path(tokenizer), Path(run_dir) / TOKENIZER_FILE
    if not source.is_file():
        raise ConfigError(f"data.tokenizer: {source} is not a file")
    digest = file_sha256(source)
    if target.exists() and resumed:
        kept = file_sha256(target)
        if kept != digest:
            raise ConfigError(
                f"data.tokenizer: {source} (sha256 {digest[:12]}) is not the tokenizer this run was "
                f"trained with ({target}, sha256 {kept[:12]}); resume with that one, or start a new run"
            )
        return TokenizerRecord(TOKENIZER_FILE, digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    aside = target.with_name(f".{TOKENIZER_FILE}.partial")
    shutil.copyfile(source, aside)
    aside.replace(target)
    return TokenizerRecord(TOKENIZER_FILE, digest)


def run_tokenizer(run_dir: Path, record: TokenizerRecord) -> Path:
    """The run's copy of its tokenizer, checked against the checkpoint's ``record``; a ``CheckpointError``
    when it is missing or changed."""
    path = Path(run_dir) / record.file
    if not path.is_file():
        raise CheckpointError(
            f"{path}: the run's tokenizer is missing (its checkpoints record sha256 {record.sha256[:12]}); "
            "copy the tokenizer the run was trained with there"
        )
    found = file_sha256(path)
    if found != record.sha256:
        raise CheckpointError(
            f"{path}: sha256 {found[:12]}, but the checkpoint was trained with sha256 {record.sha256[:12]}; "
            "put the run's own tokenizer back"
        )
    return path
