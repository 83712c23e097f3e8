"""Shared fixtures for the datastore tests: a small tokenizer, a small corpus, and stores built from them."""

import json
import os
from pathlib import Path

import pytest

from meltemi.datastore import build_store, corpora


@pytest.fixture
def tree_bytes():
    """Every file under a directory, by relative path, with its bytes: equal trees are identical stores."""

    def read(root: str | os.PathLike) -> dict[str, bytes]:
        root = Path(root)
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    return read


@pytest.fixture(scope="session")
def stdlib_files() -> list[str]:
    return corpora.python_stdlib()[:40]


@pytest.fixture(scope="session")
def tokenizer_path(tmp_path_factory, stdlib_files) -> str:
    out = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    return corpora.train_tokenizer(stdlib_files, vocab_size=400, out=out)


@pytest.fixture(scope="session")
def small_store(tmp_path_factory, stdlib_files, tokenizer_path) -> Path:
    """A store of 40 stdlib files in small chunks and shards, so reads cross many of both boundaries."""
    out = tmp_path_factory.mktemp("store") / "store"
    build_store(stdlib_files, tokenizer_path, out, chunk_tokens=1000, shard_tokens=8000, progress=False)
    return out


@pytest.fixture(scope="session")
def many_docs_store(tmp_path_factory, tokenizer_path) -> Path:
    """A store of 3,000 short documents: its offsets span three chunks (1,024 entries each)."""
    root = tmp_path_factory.mktemp("many")
    lines = (json.dumps({"text": f"def f{i}(x):" + " return x" * (i % 7)}) for i in range(3000))
    (root / "docs.jsonl").write_text("\n".join(lines) + "\n")
    build_store(str(root / "docs.jsonl"), tokenizer_path, root / "store", chunk_tokens=64, progress=False)
    return root / "store"


@pytest.fixture
def write_files(tmp_path):
    """Write `{name: str | bytes}` under a fresh directory and return the paths, sorted."""

    def write(files: dict[str, str | bytes]) -> list[str]:
        paths = []
        for name, content in files.items():
            path = tmp_path / "inputs" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
            paths.append(str(path))
        return sorted(paths)

    return write


@pytest.fixture(params=["local", "memory", "s3", "gcs"])
def any_location(request, tmp_path) -> str:
    """A fresh, empty location on each backend: a local directory, memory, an S3 and a GCS bucket."""
    if request.param == "local":
        return str(tmp_path / "here")
    if request.param == "memory":
        return f"memory://{request.node.name}/{os.urandom(6).hex()}"
    server = request.getfixturevalue(request.param)
    scheme = "s3" if request.param == "s3" else "gs"
    return f"{scheme}://{server.make_bucket()}/some/prefix"
