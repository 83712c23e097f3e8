"""A Hugging Face Hub repository named as transformers and datasets name one (`Qwen/Qwen3-0.6B`,
`trl-lib/Capybara`), found in this machine's Hub cache, where `hf download`, `from_pretrained` and
`load_dataset` put it; nothing is ever downloaded.

The cache is the directory huggingface_hub uses: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else
`hub` in `HF_HOME` (default: `huggingface` in `XDG_CACHE_HOME` or `~/.cache`). A repository lives in
`models--OWNER--NAME` (or `datasets--...`), its files in `snapshots/COMMIT/`, the commit of its main
branch in `refs/main`. A name is looked up only when no file or directory of that name is here, so a
local path always wins.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

RepoKind = Literal["model", "dataset"]
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_FILE_SUFFIXES = (  # a name ending so is a file's, never said to be missing from the cache as well
    ".txt", ".json", ".jsonl", ".gz", ".zst", ".bz2", ".xz", ".parquet", ".arrow", ".csv", ".md", ".py",
    ".jinja", ".yaml", ".yml", ".safetensors", ".bin",
)  # fmt: skip


def hub_cache() -> Path:
    """The Hub cache directory, as huggingface_hub finds it from the environment.

    >>> import os
    >>> os.environ["HF_HUB_CACHE"] = "/data/hf"
    >>> str(hub_cache())
    '/data/hf'
    >>> del os.environ["HF_HUB_CACHE"]
    """
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.environ[variable])).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def is_repo_id(text: str) -> bool:
    """Whether `text` can name a Hub repository: `NAME` or `OWNER/NAME`, letters, digits, `-`, `_`, `.`.

    >>> is_repo_id("Qwen/Qwen3-0.6B"), is_repo_id("gpt2"), is_repo_id("/tmp/x"), is_repo_id("a/b/c")
    (True, True, False, False)
    """
    return _REPO_ID.fullmatch(text) is not None and ".." not in text


def cached_snapshot(repo_id: str, kind: RepoKind) -> Path | None:
    """The directory of the main revision of `repo_id` in the Hub cache, None when it is not there.

    >>> os.environ["HF_HUB_CACHE"] = "/no/cache"
    >>> cached_snapshot("org/tiny", "model") is None
    True
    >>> del os.environ["HF_HUB_CACHE"]

    (`testing.put_in_hub_cache` lays a repository out as `hf download` does, for tests that find one.)
    """
    repository = hub_cache() / "--".join([f"{kind}s", *repo_id.split("/")])
    ref = repository / "refs" / "main"
    if not ref.is_file():
        return None
    snapshot = repository / "snapshots" / ref.read_text(encoding="utf-8").strip()
    return snapshot if snapshot.is_dir() else None


def local_or_cached(given: str, kind: RepoKind) -> str:
    """`given` as it is when it is a URL or a path that exists here; else, when it names a repository of
    `kind` in the Hub cache, the path of its snapshot; else `given` as it is (whose reader says it is
    missing, adding `not_cached`'s words).

    >>> local_or_cached("s3://bucket/run", "model"), local_or_cached("no/such-model", "model")
    ('s3://bucket/run', 'no/such-model')
    """
    if "://" in given or Path(given).expanduser().exists() or not is_repo_id(given):
        return given
    snapshot = cached_snapshot(given, kind)
    return given if snapshot is None else str(snapshot)


def not_cached(given: str, kind: RepoKind) -> str:
    """The words a missing `given` adds to its error when it looks like a Hub repository's name
    (`OWNER/NAME`, not a file's name): that no repository of that name is in the cache either (which is
    read, never downloaded into); empty otherwise.

    >>> not_cached("/tmp/x", "model"), not_cached("corpus.txt", "dataset"), not_cached("no/t.json", "model")
    ('', '', '')
    """
    if "://" in given or not is_repo_id(given) or "/" not in given or given.lower().endswith(_FILE_SUFFIXES):
        return ""
    return f", nor is a {kind} of that name in the Hugging Face cache ({hub_cache()}; read, never downloaded)"
