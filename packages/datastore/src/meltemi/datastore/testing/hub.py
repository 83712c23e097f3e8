"""A directory laid out in a Hugging Face Hub cache, as `hf download` lays it out."""

from __future__ import annotations

import os
from pathlib import Path


def put_in_hub_cache(cache: Path, repo_id: str, kind: str, files: Path, commit: str = "a" * 40) -> Path:
    """`files` (a directory) as the main revision `commit` of the Hub repository `repo_id` (`kind`: model or
    dataset) in the Hub cache `cache`, laid out as huggingface_hub lays it out: each file a blob named by its
    hash, the snapshot's files links to them; returns the snapshot's directory."""
    import hashlib

    repository = cache / "--".join([f"{kind}s", *repo_id.split("/")])
    snapshot = repository / "snapshots" / commit
    for path in sorted(p for p in files.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = repository / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path.relative_to(files)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repository / "refs").mkdir(parents=True, exist_ok=True)
    (repository / "refs" / "main").write_text(commit)
    return snapshot
