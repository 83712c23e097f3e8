"""A data set's subsets and their splits as its card names them: the `configs` of the YAML header of its
`README.md`, which Hugging Face datasets reads before looking at file names (`load_dataset(repo, name)`).

Each subset (a "config") has a `config_name` and `data_files`: a pattern (the train split), a list of them,
or a list of `{split, path}` whose `path` is a pattern or a list; patterns are relative to the data set's
directory, `*` within a directory, `**` across them. A subset without `data_files` may name a `data_dir`,
whose files' names then say their splits. The subset read is the one asked for, else the one
marked `default: true`, else the one named `default`, else the only one; a card naming several and no
default needs a choice, as `load_dataset` does.

>>> card = '''---
... configs:
... - config_name: all
...   data_files:
...   - split: train
...     path: data/all/train-*
...   - split: test
...     path: data/all/test-*
... - config_name: math
...   data_files: data/math/*.parquet
... ---
... # The card's text'''
>>> [s.name for s in card_subsets(card, "smoltalk")], card_subsets(card, "smoltalk")[1].splits
(['all', 'math'], {'train': ('data/math/*.parquet',)})
>>> chosen_subset(card_subsets(card, "smoltalk"), "math", "smoltalk").name
'math'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from meltemi.datastore.errors import InputError, Remedy, Way

CARD = "README.md"  # where a data set's card lives, at its directory's top
_HEADER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?P<yaml>.*?)^---[ \t]*$", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True)
class Subset:
    """One subset of a data set: its name, each split's path patterns (none: found from file names, under
    `data_dir` when it names one), and whether the card marks it the default."""

    name: str
    splits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    default: bool = False
    data_dir: str | None = None

    def split_of(self, relative: str) -> str | None:
        """The split whose patterns match a file's path below the data set's directory; None if none does.

        >>> subset = Subset("all", {"train": ("data/**/train-*",), "test": ("test.jsonl",)})
        >>> subset.split_of("data/a/train-0.jsonl"), subset.split_of("data/a/test-0.jsonl")
        ('train', None)
        """
        return next(
            (s for s, patterns in self.splits.items() if any(_matches(p, relative) for p in patterns)), None
        )


def card_metadata(card: str, where: str) -> dict[str, Any] | None:
    """The YAML header of the card text `card` (None without one); an `InputError` naming `where` (the data
    set) when it is not YAML.

    >>> card_metadata("---\\nlicense: mit\\n---\\n# Title", "d"), card_metadata("# Title", "d")
    ({'license': 'mit'}, None)
    """
    header = _HEADER.match(card)
    if header is None:
        return None
    import yaml

    try:
        metadata = yaml.safe_load(header["yaml"])
    except yaml.YAMLError as e:
        raise InputError(f"{where}/{CARD}: its YAML header cannot be read ({_first_line(e)})") from None
    return metadata if isinstance(metadata, dict) else {}


def describes_data(metadata: dict[str, Any] | None) -> bool:
    """Whether a card's header is a Hugging Face data set's: it names its subsets (`configs`) or its
    features and splits (`dataset_info`), as the Hub writes them (a site's front matter does not)."""
    return metadata is not None and bool({"configs", "dataset_info"} & metadata.keys())


def card_subsets(card: str | dict[str, Any] | None, where: str) -> list[Subset]:
    """The subsets the card names in its YAML header (`card`: its text, or the header `card_metadata`
    read); none without a header or `configs`. An `InputError` naming `where` (the data set) when the header
    is not YAML or `configs` is malformed."""
    metadata = card_metadata(card, where) if isinstance(card, str) else card
    configs = None if metadata is None else metadata.get("configs")
    if configs is None:
        return []
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise InputError(f"{where}/{CARD}: its configs are not a list of subsets (config_name, data_files)")
    subsets = [_subset(entry, f"{where}/{CARD}") for entry in configs]
    names = [s.name for s in subsets]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InputError(f"{where}/{CARD}: the subset {', '.join(twice)} is named twice in its configs")
    return subsets


def chosen_subset(subsets: Sequence[Subset], name: str | None, where: str) -> Subset | None:
    """The subset to read: `name`, else the card's default; None when the card names none (and no `name`).
    An `InputError` naming `where` when `name` is not one of them, or when none is the default (its remedy:
    naming one, `subset`).

    >>> subsets = [Subset("all"), Subset("math")]
    >>> chosen_subset(subsets, None, "smoltalk")
    Traceback (most recent call last):
    ...
    meltemi.datastore.errors.InputError: smoltalk: its README.md names the subsets all, math, and none is \
its default: choose one (--subset NAME)
    """
    names = ", ".join(s.name for s in subsets)
    if name is not None:
        if not subsets:
            raise InputError(f"{where}: its {CARD} names no subsets (configs), so none is called {name!r}")
        found = next((s for s in subsets if s.name == name), None)
        if found is None:
            raise InputError(f"{where}: its {CARD} names the subsets {names}, not {name!r}")
        return found
    if not subsets:
        return None
    marked = [s for s in subsets if s.default] or [s for s in subsets if s.name == "default"]
    if marked or len(subsets) == 1:
        return (marked or list(subsets))[0]
    choose = Remedy(": choose one ({})", (Way({"subset": "NAME"}),), otherwise=": choose one (subset)")
    raise InputError(
        f"{where}: its {CARD} names the subsets {names}, and none is its default", remedies=(choose,)
    )


def _subset(entry: dict[str, Any], where: str) -> Subset:
    name = entry.get("config_name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: a subset in its configs has no config_name")
    files = entry.get("data_files")
    wrong = InputError(
        f"{where}: subset {name!r}: data_files is not a pattern, a list of them, or a list of {{split, path}}"
    )
    if files is None:
        splits: dict[str, tuple[str, ...]] = {}
    elif isinstance(files, str | list) and all(isinstance(f, str) for f in _listed(files)):
        splits = {"train": tuple(_listed(files))}
    elif isinstance(files, list) and all(
        isinstance(f, dict) and {"split", "path"} <= f.keys() for f in files
    ):
        splits = {}
        for item in files:
            paths = _listed(item["path"])
            if not isinstance(item["split"], str) or not all(isinstance(p, str) for p in paths):
                raise wrong
            splits[item["split"]] = splits.get(item["split"], ()) + tuple(paths)
    elif isinstance(files, dict) and all(isinstance(k, str) for k in files):
        splits = {split: tuple(_listed(paths)) for split, paths in files.items()}
        if not all(isinstance(p, str) for paths in splits.values() for p in paths):
            raise wrong
    else:
        raise wrong
    data_dir = entry.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise InputError(f"{where}: subset {name!r}: data_dir is not a directory's path")
    return Subset(
        name, splits, entry.get("default") is True, None if data_dir is None else data_dir.strip("/")
    )


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _matches(pattern: str, relative: str) -> bool:
    """Whether a path matches a data_files pattern as fsspec globs it: `*` and `?` within a directory, `**`
    across them."""
    from fsspec.utils import glob_translate

    return re.fullmatch(glob_translate(pattern.removeprefix("./")), relative) is not None


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]
