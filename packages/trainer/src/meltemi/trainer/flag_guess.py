"""What a word a command line did not take likely meant, guessed in one place for every command: the
trainer's (``command``), its config overrides and files (``config_io``) and the apps that read a trained model
(``generate.flags``). In order: our own spelling of it (``--max_new_tokens`` is ``--max-new-tokens``),
another tool's name for one of our settings (``other_names``' tables), a config field given to a command that
takes none, a near spelling, and for a value given without its flag, what it likely is.

>>> print(guess("--n-predict", Takes(flags=("--max-new-tokens", "--prompt"))).said(otherwise="; --help"))
; --n-predict (llama.cpp) is --max-new-tokens here
>>> print(guess("--max_steps", Takes(flags=("--run-dir",), fields=True)).said())
; max_steps (transformers' TrainingArguments) is --trainer.num_train_steps here
>>> print(guess("--dryrun", Takes(flags=("--dry-run", "--config"))).said())
 (did you mean --dry-run?)
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence
from pathlib import Path

from meltemi.trainer.other_names import APP_FLAGS, OTHER_NAMES, OtherName

NEAR = 0.8  # how alike (difflib's ratio) a word and a flag must be for the flag to be offered


@dataclasses.dataclass(frozen=True)
class Takes:
    """What a command line takes: its own ``flags`` (``--name``); whether it takes config ``fields`` (then
    another tool's name for any of our settings is answered, the ``fine_tuning`` command's own flag where it
    has one, ``--base``), said as a config file's keys (``keys``: ``trainer.seed``) or as flags."""

    flags: tuple[str, ...] = ()
    fields: bool = False
    fine_tuning: bool = False
    keys: bool = False


@dataclasses.dataclass(frozen=True)
class Hint:
    """What a word likely meant, as data; at most one part is set. ``other``: another tool's name for one of
    ours, in words; ``near``: our names spelled nearly so, best first; ``fields_where``: where config fields
    are set, for a command that takes none; ``value``: what a value given without its flag likely is."""

    other: str | None = None
    near: tuple[str, ...] = ()
    fields_where: str | None = None
    value: str | None = None

    def said(self, *, otherwise: str = "", parenthesized: bool = True) -> str:
        """The hint as it follows an error's first words (``--x: not a flag of this command``): a near
        spelling `` (did you mean A or B?)``, or ``; did you mean A?`` unless ``parenthesized``; another
        tool's name after ``; ``; ``otherwise`` when nothing fits.

        >>> Hint(near=("--top-k",)).said(parenthesized=False), Hint().said(otherwise="; --help lists them")
        ('; did you mean --top-k?', '; --help lists them')
        """
        if self.other is not None:
            return f"; {self.other}"
        if self.near:
            asked = f"did you mean {' or '.join(self.near)}?"
            return f" ({asked})" if parenthesized else f"; {asked}"
        if self.fields_where is not None:
            return f" (config fields are set only {self.fields_where}; --help lists its flags)"
        if self.value is not None:
            return f" ({self.value}; --help lists the flags)"
        return otherwise


def guess(word: str, takes: Takes, *, near: Sequence[str] = ()) -> Hint:
    """What ``word`` likely meant to a command that ``takes`` so much: ``word`` as typed (``--flag``,
    ``--flag=VALUE``, ``--section.field``, a config file's ``section.key`` when ``takes.keys``, or a value);
    ``near``, the caller's own near names for it (a config's fields in its place), offered before a near
    spelling of a flag.

    >>> guess("--trainer.seed", Takes(flags=("--dry-run",))).said()
    ' (config fields are set only with --dry-run; --help lists its flags)'
    >>> guess("def ", Takes(flags=("--prompt",))).value
    'the text to continue is --prompt TEXT'
    """
    if not takes.keys and not is_flag(word):
        return Hint(value=_value(word, takes.flags))
    name = word.partition("=")[0]
    respelled = "--" + name.lstrip("-").replace("_", "-").lower()
    if respelled in takes.flags and respelled != name:
        return Hint(near=(respelled,))
    other = _other_name(name, takes)
    if other is not None:
        return Hint(other=other)
    if "." in name and not takes.fields:
        where = "with --dry-run" if "--dry-run" in takes.flags else "by the commands that train"
        return Hint(fields_where=where)
    if near:
        return Hint(near=tuple(near))
    return Hint(near=tuple(difflib.get_close_matches(respelled, takes.flags, n=1, cutoff=NEAR)))


def _other_name(name: str, takes: Takes) -> str | None:
    """Another tool's name ``name`` as one of ours that ``takes`` has, in words: an app's flag (said as
    typed: ``--n-predict (llama.cpp) is --max-new-tokens here``), else a setting (said by its last word:
    ``max_steps (transformers' TrainingArguments) is --trainer.num_train_steps here``); None when no tool we
    know names one of ours so."""
    bare = name.lstrip("-")
    for other in APP_FLAGS.get(bare.replace("-", "_"), ()):
        if other.ours in takes.flags:
            return _in_words(name, other, other.ours)
    leaf = bare.rpartition(".")[2]
    other = OTHER_NAMES.get(leaf.replace("-", "_")) if takes.fields else None
    if other is None:
        return None
    ours = other.fine_tuning if takes.fine_tuning and other.fine_tuning else other.ours
    if not takes.keys and not ours.startswith("--"):
        ours = f"--{ours}"
    return _in_words(leaf, other, ours)


def _in_words(name: str, other: OtherName, ours: str) -> str:
    differs = f" ({other.differs})" if other.differs else ""
    return f"{name} ({other.whose}) is {ours} here{differs}"


def _value(word: str, flags: Sequence[str]) -> str:
    """What a value given without a flag likely is: a path that exists here, the checkpoint; other text,
    an app's prompt or message."""
    if Path(word).exists() and "--checkpoint" in flags:
        return f"a model to read is --checkpoint {word}"
    if "--prompt" in flags:
        return "the text to continue is --prompt TEXT"
    if "--message" in flags:
        return "a message is --message TEXT"
    return "each value follows its flag"


def is_flag(word: str) -> bool:
    """Whether a word left over on a command line is a flag, not a value (``-2`` is a value).

    >>> is_flag("--bogus"), is_flag("-2"), is_flag("def ")
    (True, False, False)
    """
    if not word.startswith("-"):
        return False
    try:
        float(word)
    except ValueError:
        return True
    return False
