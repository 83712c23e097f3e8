"""A run's tokenizer, kept in the run: a copy in ``<run dir>/tokenizer.json`` whose SHA-256 every checkpoint
records, and the one rule for the token that ends a text (where export says generation stops, and where
sampling stops).

A run directory (local or in a bucket) is then self-contained: export and sampling read the run's copy,
from any working directory, after the original (often under ``.cache``) is gone; a copy that changed
since the checkpoint was written is one clear error.

The end-of-text rule: a chat run's end-of-turn token (its chat stores' ``chat.end_of_turn``: what an
assistant's reply ends with), else the token the run's token stores put after every document (their
manifests' ``tokenizer.eos_id``; the first source's when they differ), else the first of the datastore's
candidates (``<|endoftext|>``, ``</s>``, ...) the tokenizer has, else none. Generation stops at that token
and, in a chat run, also at the end-of-text token the text rule finds (``EndOfText.stop_ids``).

>>> import tempfile
>>> from meltemi.datastore import corpora
>>> from meltemi.datastore.corpora import python_stdlib
>>> from pathlib import Path
>>> out = Path(tempfile.mkdtemp())
>>> path = corpora.train_tokenizer(sorted(python_stdlib())[:3], 300, out / "t.json")
>>> end_of_text(path)
EndOfText(token='<|endoftext|>', id=0, others=())
>>> record = copy_into_run(path, out / "run", resumed=False)
>>> run_tokenizer(out / "run", record) == str(out / "run" / "tokenizer.json")
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence

from tokenizers import Tokenizer

from meltemi.datastore import TokenizerFileError, load_tokenizer
from meltemi.datastore.storage import Directory, Location, read_object
from meltemi.trainer.errors import CheckpointError, ConfigError, TrainerError
from meltemi.trainer.run_directory import RunDirectory

TOKENIZER_FILE = "tokenizer.json"


def tokenizer_file(spec: str) -> str:
    """``data.tokenizer`` as the file it names: a ``tokenizer.json``; a directory holding one (a Hugging
    Face model's, as ``AutoTokenizer.from_pretrained`` reads it); or a model's Hub name in this machine's
    Hugging Face cache (``meta-llama/Llama-3.2-1B``); any other value as it is (``stdlib``, a URL).

    >>> import tempfile, pathlib
    >>> model = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (model / "tokenizer.json").write_text("{}")
    >>> tokenizer_file(str(model)) == str(model / "tokenizer.json"), tokenizer_file("stdlib")
    (True, 'stdlib')
    """
    from meltemi.datastore.hub_cache import local_or_cached

    found = local_or_cached(spec, "model")
    local = Location.parse(found).local_path
    if local is not None and local.is_dir() and (local / TOKENIZER_FILE).is_file():
        return str(local / TOKENIZER_FILE)
    return found


@dataclasses.dataclass(frozen=True)
class EndOfText:
    """The token that ends a text (a chat run's: the end of a turn), and its id; None for both when the
    tokenizer has none. ``others`` are further ids generation stops at (a chat run's end-of-text token)."""

    token: str | None
    id: int | None
    others: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Every id generation stops at, the end-of-text id first.

        >>> EndOfText("<|eot_id|>", 4, (0,)).stop_ids, EndOfText(None, None).stop_ids
        ((4, 0), ())
        """
        return tuple(dict.fromkeys(([] if self.id is None else [self.id]) + list(self.others)))


@dataclasses.dataclass(frozen=True)
class TokenizerRecord:
    """What a checkpoint records of its run's tokenizer: the copy's file name in the run directory and the
    SHA-256 of its bytes."""

    file: str
    sha256: str


def file_sha256(path: str | os.PathLike | Location) -> str:
    """The SHA-256 of the tokenizer file a path or URL names."""
    return hashlib.sha256(tokenizer_bytes(path)).hexdigest()


def tokenizer_at(
    tokenizer: Tokenizer | str | os.PathLike | Location,
    error: type[TrainerError] = TrainerError,
    field: str | None = None,
) -> Tokenizer:
    """The tokenizer a path or URL names (read through the storage seam, parsed once per process; shared:
    copy it before changing it), or ``tokenizer`` itself when already parsed; a missing or broken file is
    ``error`` (the stage's own kind), naming it (after ``field``, what named it, when given).

    >>> tokenizer_at("memory://doc/nowhere/tokenizer.json")
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.TrainerError: tokenizer 'memory://doc/nowhere/tokenizer.json': no such file
    """
    if isinstance(tokenizer, Tokenizer):
        return tokenizer
    try:
        return load_tokenizer(tokenizer)
    except TokenizerFileError as failure:
        raise error(str(failure) if field is None else f"{field}: {failure}") from None


def end_of_text(
    tokenizer: Tokenizer | str | os.PathLike | None,
    store_eos_ids: Sequence[int | None] = (),
    end_of_turn: str | None = None,
) -> EndOfText:
    """The end-of-text token of a run: a chat run's ``end_of_turn`` (generation also stopping at the text
    rule's token), else the stores' (``store_eos_ids``, each store's recorded ``eos_id``), else the first of
    the datastore's candidates that ``tokenizer`` has, else none."""
    from meltemi.datastore.build.units import EOS_CANDIDATES

    recorded = [i for i in store_eos_ids if i is not None]
    vocabulary = None if tokenizer is None else tokenizer_at(tokenizer)
    text = EndOfText(None, None)
    if recorded:
        text = EndOfText(None if vocabulary is None else vocabulary.id_to_token(recorded[0]), recorded[0])
    elif vocabulary is not None:
        for candidate in EOS_CANDIDATES:
            token_id = vocabulary.token_to_id(candidate)
            if token_id is not None:
                text = EndOfText(candidate, token_id)
                break
    turn_id = None if end_of_turn is None or vocabulary is None else vocabulary.token_to_id(end_of_turn)
    if turn_id is None:
        return text
    return EndOfText(end_of_turn, turn_id, tuple(i for i in text.stop_ids if i != turn_id))


def tokenizer_bytes(tokenizer: str | os.PathLike | Location) -> bytes:
    """The bytes of the tokenizer file a path or URL names; a ``ConfigError`` when there is none."""
    data = read_object(tokenizer)
    if data is None:
        raise ConfigError(f"data.tokenizer: {tokenizer} is not a file")
    return data


def copy_into_run(
    tokenizer: str | os.PathLike | Location,
    run_dir: str | os.PathLike | Location | Directory,
    *,
    resumed: bool,
) -> TokenizerRecord:
    """Copy ``tokenizer`` into ``run_dir`` (a local directory or a bucket; one atomic write) and return its
    record.

    A resumed run whose copy differs from ``tokenizer`` is a ``ConfigError`` (its checkpoints were trained
    with the copy), checked before anything is written."""
    run = run_dir if isinstance(run_dir, Directory) else Directory(run_dir)
    data = tokenizer_bytes(tokenizer)
    digest = hashlib.sha256(data).hexdigest()
    kept = run.read_bytes(RunDirectory.TOKENIZER) if resumed else None
    if kept is not None:
        kept_digest = hashlib.sha256(kept).hexdigest()
        if kept_digest != digest:
            raise ConfigError(
                f"data.tokenizer: {tokenizer} (sha256 {digest[:12]}) is not the tokenizer this run was "
                f"trained with ({run.where(RunDirectory.TOKENIZER)}, sha256 {kept_digest[:12]}); resume "
                "with that one, or start a new run"
            )
        return TokenizerRecord(RunDirectory.TOKENIZER, digest)
    run.write_bytes(RunDirectory.TOKENIZER, data)
    return TokenizerRecord(RunDirectory.TOKENIZER, digest)


def run_tokenizer(run_dir: str | os.PathLike | Location | Directory, record: TokenizerRecord) -> str:
    """Where the run's copy of its tokenizer lies (a path, or a URL in the run's bucket), checked against the
    checkpoint's ``record``; a ``CheckpointError`` when it is missing or changed."""
    run = run_dir if isinstance(run_dir, Directory) else Directory(run_dir)
    where = run.where(record.file)
    data = run.read_bytes(record.file)
    if data is None:
        raise CheckpointError(
            f"{where}: the run's tokenizer is missing (its checkpoints record sha256 {record.sha256[:12]}); "
            "copy the tokenizer the run was trained with there"
        )
    found = hashlib.sha256(data).hexdigest()
    if found != record.sha256:
        raise CheckpointError(
            f"{where}: sha256 {found[:12]}, but the checkpoint was trained with sha256 {record.sha256[:12]}; "
            "put the run's own tokenizer back"
        )
    return where
