"""apps/build_stores.py as a user runs it: a run config whose sources name their raw inputs (``build_from``)
has every missing store built by one command, side by side; a rerun finds them built; ``--dry-run`` builds
nothing; a source whose inputs are missing is one line naming it while the others are built.

Each source is a few of the standard library's files, tokenized with the session's small tokenizer (the
root conftest's ``small_corpus``).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from meltemi.datastore import corpora

ROOT = Path(__file__).resolve().parents[1]


def build_stores(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "apps" / "build_stores.py"), *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stdlib_modules() -> list[str]:
    """Eight small standard-library modules with some text in each."""
    files = sorted(corpora.python_stdlib(), key=lambda path: (os.path.getsize(path), path))
    return [path for path in files if os.path.getsize(path) > 2000][:8]


@pytest.fixture
def run_config(tmp_path, small_corpus, stdlib_modules) -> Path:
    """A run config with two sources, each built from four modules into its own store under ``tmp_path``."""
    config = {
        "model": {"vocab_size": 384},
        "data": {
            "tokenizer": small_corpus["tokenizer"],
            "sources": {
                "web": {"store": "stores/web", "build_from": stdlib_modules[:4]},
                "code": {"store": "stores/code", "build_from": stdlib_modules[4:], "weight": 2.0},
            },
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_every_missing_store_is_built_by_one_command_and_a_rerun_finds_them_built(run_config, tmp_path):
    built = build_stores("--config", str(run_config), cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    lines = sorted(built.stdout.splitlines())
    assert len(lines) == 2, built.stdout
    assert lines[0].startswith("data.sources.code: stores/code: built 4 docs, ")
    assert lines[1].startswith("data.sources.web: stores/web: built 4 docs, ")
    assert "data.sources.web: building stores/web from " in built.stderr
    for name in ("web", "code"):
        assert (tmp_path / "stores" / name / "manifest.json").is_file()

    again = build_stores("--config", str(run_config), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "data.sources.web: stores/web: already built; skipped",
        "data.sources.code: stores/code: already built; skipped",
    ]
    planned = build_stores("--config", str(run_config), "--dry-run", cwd=tmp_path)
    assert [line.partition(" (")[0] for line in planned.stdout.splitlines()] == [
        "data.sources.web: stores/web is built already",
        "data.sources.code: stores/code is built already",
    ]


def test_a_dry_run_says_what_would_be_built_and_builds_nothing(run_config, tmp_path, stdlib_modules):
    planned = build_stores("--config", str(run_config), "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    shown = ", ".join(stdlib_modules[:3])
    assert (
        planned.stdout.splitlines()[0]
        == f"data.sources.web: stores/web is to be built from {shown} and 1 more"
    )
    assert planned.stdout.splitlines()[1].startswith("data.sources.code: stores/code is to be built from ")
    assert not (tmp_path / "stores").exists()


def test_a_source_with_a_missing_input_is_one_line_and_the_others_store_is_built(run_config, tmp_path):
    missing = str(tmp_path / "raw" / "nothing.jsonl")
    failed = build_stores("--config", str(run_config), "--data.sources.web.build_from", missing, cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: data.sources.web: input '{missing}': no such file or directory"], failed.stderr
    assert failed.stdout.startswith("data.sources.code: stores/code: built 4 docs, ")
    assert (tmp_path / "stores" / "code" / "manifest.json").is_file()
    assert not (tmp_path / "stores" / "web" / "manifest.json").exists()


def test_a_config_without_inputs_to_build_from_has_nothing_to_build(tmp_path):
    done = build_stores("--config", str(ROOT / "configs" / "tiny.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "nothing to build: no source of data.sources names the raw inputs of its store (build_from)\n"
    )


def test_help_answers_without_importing_jax(tmp_path):
    command = [sys.executable, "-X", "importtime", str(ROOT / "apps" / "build_stores.py"), "--help"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: uv run apps/build_stores.py [--config PATH]")
    assert "--ray ADDRESS" in done.stdout and "--data.sources" in done.stdout
    imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if "|" in line}
    assert not {name for name in imported if name == "jax" or name.startswith(("jax.", "ray"))}
