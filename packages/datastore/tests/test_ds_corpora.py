"""The default corpus is stable and the tokenizer trainer is deterministic."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from meltemi.datastore import InputError, corpora


def test_python_stdlib_lists_sorted_py_files_without_site_packages_or_tests():
    files = corpora.python_stdlib()
    assert files == sorted(files) and len(files) > 100
    assert all(f.endswith(".py") and "site-packages" not in f and "/test/" not in f for f in files)
    assert len(corpora.python_stdlib(include_tests=True)) > len(files)


TRAIN = """
import sys
from meltemi.datastore import corpora
corpora.train_tokenizer(corpora.python_stdlib()[:15], 350, sys.argv[1])
"""


def test_training_twice_in_fresh_processes_gives_the_same_tokenizer(tmp_path):
    digests = []
    for seed in ("1", "2"):
        out = tmp_path / f"tok{seed}.json"
        env = {"PYTHONHASHSEED": seed, "PATH": ""}
        subprocess.run([sys.executable, "-c", TRAIN, str(out)], check=True, env=env)
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_training_needs_files_and_room_for_the_bytes(tmp_path):
    with pytest.raises(InputError, match="at least one file"):
        corpora.train_tokenizer([], 300, tmp_path / "t.json")
    with pytest.raises(InputError, match="absent.py"):
        corpora.train_tokenizer([tmp_path / "absent.py"], 300, tmp_path / "t.json")
    with pytest.raises(ValueError, match=r"at least 261 \(256 bytes \+ 5 special tokens\)"):
        corpora.train_tokenizer(corpora.python_stdlib()[:1], 100, tmp_path / "t.json")


def test_the_stdlib_corpus_is_built_once_and_reused(tmp_path):
    """The docstring examples of ``stdlib_corpus`` and ``stdlib_tokenizer``, run here (the doctests skip
    them: a build is about 13 CPU-seconds, and the tokenizer alone 3), with the checks that nothing was
    rebuilt or left behind."""
    from meltemi.datastore import TokenStore
    from meltemi.datastore.corpora import stdlib_corpus, stdlib_tokenizer

    tokenizer, store = stdlib_corpus(tmp_path / "stdlib", 300)
    manifest = Path(store) / "manifest.json"
    built = (Path(tokenizer).read_bytes(), manifest.stat().st_mtime_ns)
    assert stdlib_corpus(tmp_path / "stdlib", 300) == (tokenizer, store)
    assert stdlib_tokenizer(tmp_path / "stdlib", 300) == tokenizer == f"{tmp_path}/stdlib/tokenizer.json"
    assert (Path(tokenizer).read_bytes(), manifest.stat().st_mtime_ns) == built
    assert TokenStore.open(store, tokenizer=tokenizer).num_docs > 500
    assert not list((tmp_path / "stdlib").glob(".tokenizer-*"))
