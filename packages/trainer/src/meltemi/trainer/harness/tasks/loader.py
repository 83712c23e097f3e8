"""Loads a shipped task's data file, which lies beside this module (``dataset_kwargs.data_file`` in the
task's YAML), as the harness's ``test`` split: no network, no cache, wherever the package is installed."""

import json
from pathlib import Path

import datasets


def load(data_file: str, **metadata) -> dict[str, datasets.Dataset]:
    """``{"test": the documents of data_file}``; a missing file is a ``FileNotFoundError`` naming it."""
    path = Path(__file__).resolve().parent / data_file
    if not path.is_file():
        raise FileNotFoundError(2, "the task's data file is missing", str(path))
    docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {"test": datasets.Dataset.from_list(docs)}
