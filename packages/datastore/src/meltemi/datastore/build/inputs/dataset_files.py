"""Which files of a data set's directory (or bucket prefix) are its training data, found as Hugging Face
datasets finds them: by their extensions (`DATA_SUFFIXES`, compressed or not; its `README.md` and the records
`save_to_disk` writes are not data), then, when their paths name splits, the train split only, so a data
set's test conversations or documents are not trained on. Splits are named as datasets names them: first by
sharded files, `data/SPLIT-00000-of-00002.parquet`, whose SPLIT is the split's whole name (`train_sft`,
`test_gen`), else by a split's word in the path (`test/part.jsonl`, `validation.json`). The train split is
the one named `train`, else the only one whose name has a train word in it (UltraChat's `train_sft`, where
`load_dataset` has no `train`); several such are refused, naming them. A card's subsets, when it names them,
choose the files first (`dataset_card`).

>>> files = ["/d/README.md", "/d/data/train-0.parquet", "/d/data/train-1.parquet", "/d/data/test-0.parquet"]
>>> chosen = training_files("/d", files)
>>> [f.rpartition("/")[2] for f in chosen.files], chosen.other_splits
(['train-0.parquet', 'train-1.parquet'], {'test': 1})
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from meltemi.datastore.build.inputs.compression import CODECS, uncompressed_name
from meltemi.datastore.build.inputs.dataset_card import Subset
from meltemi.datastore.errors import InputError

# the files a data set's directory is read for, each maybe compressed (`compression.CODECS`)
DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
NOT_DATA = ("dataset_info.json", "dataset_dict.json", "state.json")  # Hugging Face datasets' own records
SPLIT_WORDS = {  # the words that name a split in a file's path, as Hugging Face datasets reads them
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}


_SHARDED = re.compile(r"(?:^|/)data/(?P<split>\w+(?:\.\w+)*)-\d{5}-of-\d{5}[^/]*$")  # datasets' first pattern


@dataclass(frozen=True)
class TrainingFiles:
    """The files of a listing to train on, how many files of each other split were left out (`none`: those
    whose path names no split, beside others that do), the split read (None when none is named) and the
    subset of the data set's card read (None when its card names none)."""

    files: list[str]
    other_splits: dict[str, int] = field(default_factory=dict)
    split: str | None = None
    subset: str | None = None


def training_files(
    item: str, files: Sequence[str], split: str | None = None, subset: Subset | None = None, root: str = ""
) -> TrainingFiles:
    """The data files among those listed under `item` (a directory or prefix), of the train split (or of
    `split`) when their paths name splits; with a `subset` of the data set's card whose `data_files` name
    the splits (paths below `root`, the data set's directory), the files its patterns match. An `InputError`
    naming `item` when none is data, or when the splits they name hold no train split (or no `split`)."""
    data = [f for f in files if _is_data(f)]
    if not data:
        suffixes, codecs = ", ".join(DATA_SUFFIXES), ", ".join(CODECS)
        raise InputError(
            f"input {item!r}: holds no file ending {suffixes} (or those compressed: {codecs}) "
            f"({_some_names(files)})"
        )
    named_by = subset.name if subset is not None else None
    if subset is not None and subset.splits:
        splits = {f: s for f in data if (s := subset.split_of(f[len(root) :]))}
        if not splits:
            patterns = ", ".join(p for paths in subset.splits.values() for p in paths)
            raise InputError(
                f"input {item!r}: the data_files of its subset {subset.name!r} ({patterns}) match none of "
                f"its JSON, Parquet or Arrow files ({_some_names(data)})"
            )
        data = list(splits)
    else:
        if subset is not None and subset.data_dir:
            data = [f for f in data if f.startswith(f"{root}{subset.data_dir}/")]
            if not data:
                raise InputError(
                    f"input {item!r}: the data_dir of its subset {subset.name!r} holds no data file"
                )
        root = common_directory(data)
        sharded = {f: m["split"] for f in data if (m := _SHARDED.search(f))}
        splits = sharded or {f: split_of(f[len(root) :]) for f in data}
    if not any(splits.values()):
        return TrainingFiles(list(data), subset=named_by)
    named = {name for name in splits.values() if name}
    if split is not None and split not in named:
        raise InputError(f"input {item!r}: its files name the splits {', '.join(sorted(named))}, not {split}")
    chosen = split or _train_split(item, named)
    kept = [f for f in data if splits.get(f) == chosen]
    others = Counter(splits.get(f) for f in data if splits.get(f) != chosen)
    counted = {split or "none": n for split, n in sorted(others.items(), key=lambda s: s[0] or "")}
    return TrainingFiles(kept, counted, chosen, named_by)


def _is_data(name: str) -> bool:
    return uncompressed_name(name).lower().endswith(DATA_SUFFIXES) and _file_name(name) not in NOT_DATA


def held_out_split(splits: Iterable[str], train: str) -> str | None:
    """The split to evaluate on beside the `train` split read: `test`, else the one split with a test word
    (the one that shares the train split's other words when several do: UltraChat's `test_sft` beside
    `train_sft`), else the same for validation; None when there is none.

    >>> held_out_split(["test_gen", "test_sft", "train_gen"], "train_sft"), held_out_split(["none"], "train")
    ('test_sft', None)
    """
    names = [name for name in splits if name != "none"]
    rest = _words(train) - set(SPLIT_WORDS["train"])
    for kind in ("test", "validation"):
        if kind in names:
            return kind
        candidates = sorted(name for name in names if _words(name) & set(SPLIT_WORDS[kind]))
        matching = [name for name in candidates if _words(name) - set(SPLIT_WORDS[kind]) == rest]
        for found in (candidates, matching):
            if len(found) == 1:
                return found[0]
    return None


def _words(split: str) -> set[str]:
    return set(re.split(r"[-._ 0-9]+", split.lower())) - {""}


def _train_split(item: str, splits: set[str]) -> str:
    """The split to train on among `splits`: `train`, else the only one whose name has a train word."""
    if "train" in splits:
        return "train"
    trains = sorted(s for s in splits if _words(s) & set(SPLIT_WORDS["train"]))
    if len(trains) == 1:
        return trains[0]
    named = ", ".join(sorted(splits))
    if not trains:
        raise InputError(
            f"input {item!r}: its files name the splits {named} but no train split; name the files to train "
            "on"
        )
    raise InputError(
        f"input {item!r}: its files name the splits {named}, of which {' and '.join(trains)} are for "
        f"training; name the files of the one to train on (as {item.rstrip('/')}/data/{trains[0]}-*)"
    )


def split_of(relative: str) -> str | None:
    """The split a file's path (below its data set's directory) names: a word of it, between `-`, `.`, `_`,
    `/`, spaces or digits, that is a split's (`SPLIT_WORDS`); None when it names none.

    >>> split_of("data/train-00000-of-00002.parquet"), split_of("test/part.jsonl"), split_of("devops.jsonl")
    ('train', 'test', None)
    """
    words = set(re.split(r"[-._ 0-9/]+", relative.lower()))
    return next((split for split, names in SPLIT_WORDS.items() if words.intersection(names)), None)


def common_directory(files: Sequence[str]) -> str:
    """The longest directory (with its trailing `/`) that holds every file.

    >>> common_directory(["/d/data/a.parquet", "/d/README.md"])
    '/d/'
    """
    parts = [f.split("/")[:-1] for f in files]
    common = []
    for names in zip(*parts, strict=False):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    return "/".join(common) + "/" if common else ""


def _file_name(url: str) -> str:
    return url.rstrip("/").rpartition("/")[2]


def _some_names(files: Sequence[str], shown: int = 4) -> str:
    """`3 other files: a.csv, b.csv, c.txt`, the first `shown` file names of a listing.

    >>> _some_names(["/d/a.csv", "/d/b.txt", "/d/c", "/d/e", "/d/f"], shown=2)
    '5 other files: a.csv, b.txt and 3 more'
    """
    names = sorted(_file_name(f) for f in files)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{len(names)} other file{'s' * (len(names) != 1)}: {', '.join(names[:shown])}{more}"
