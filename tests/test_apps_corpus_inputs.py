"""apps/pretrain.py --data.corpus with the inputs a user really has: binary files, text that is not UTF-8,
JSONL without the field, a corpus edited after its store was built, and the default config's tokenizer.

Each command runs as a subprocess in a directory holding the default corpus of the small model already
(built once per session, as tests/test_apps.py does), so the default tokenizer is at hand.
"""

import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from meltemi.trainer.step.fake_devices import fake_devices_environ

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "--model.vocab_size", "512", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
    "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
    "--data.seq_len", "16", "--trainer.global_batch_size", "8", "--trainer.eval_batches", "1",
    "--trainer.log_every", "1", "--trainer.eval_every", "0", "--data.eval_fraction", "0.1",
    "--trainer.num_train_steps", "2",
]  # fmt: skip
DATASTORE_FLAGS = (
    "--invalid-utf8",
    "--overwrite",
    "--text-field",
    "--skip-bad-lines",
    "--no-eos",
    "-m meltemi",
)
DOCS = ("README.md", "docs/design.md", "packages/datastore/README.md")


def app(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = fake_devices_environ(1)
    command = [sys.executable, str(ROOT / "apps" / "pretrain.py"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def workdir(with_default_corpus) -> Path:
    """A directory holding the small model's default corpus where the app looks for it, as after a first
    run (tests/conftest.py's ``with_default_corpus``)."""
    return with_default_corpus


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\0"))


def _error(result: subprocess.CompletedProcess) -> str:
    """The one-line error the app ended with, checked to name none of the datastore command's flags."""
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    assert not [flag for flag in DATASTORE_FLAGS if flag in result.stderr], result.stderr
    return last


def test_a_binary_corpus_is_an_error_naming_file_and_byte_and_the_apps_own_flags(workdir):
    (workdir / "image.png").write_bytes(_png())
    last = _error(app(*SMALL, "--data.corpus", "image.png", cwd=workdir))
    assert "image.png: not UTF-8 text at byte 0 (0x89: invalid start byte)" in last
    assert "with --data.invalid_utf8 skip" in last and "with --data.invalid_utf8 replace" in last
    assert not list((workdir / ".cache" / "meltemi" / "corpora").glob("*/manifest.json"))


def test_bad_jsonl_and_parquet_hint_at_the_apps_own_flags(workdir):
    (workdir / "lines.jsonl").write_text('{"text": "def f(): pass"}\n{"body": "x"}\n')
    last = _error(app(*SMALL, "--data.corpus", "lines.jsonl", cwd=workdir))
    assert "lines.jsonl, line 2: no 'text' field (pass --data.text_field FIELD to name another)" in last
    assert "with --data.skip_bad_lines true" in last
    pq.write_table(pa.table({"body": ["def f(): pass"]}), workdir / "rows.parquet")
    last = _error(app(*SMALL, "--data.corpus", "rows.parquet", cwd=workdir))
    assert "rows.parquet: no column 'text' (columns: body); pass --data.text_field FIELD" in last


def test_a_corpus_with_text_that_is_not_utf8_trains_when_asked_and_says_how_many_it_left_out(workdir):
    """The default config's tokenizer (stdlib) is the standard library's; the count is printed;
    a corpus edited later is an error naming the app's flag that rebuilds its store."""
    lines = [json.dumps({"body": f"def f{i}(x):\n    return x * {i}\n"}).encode() for i in range(300)]
    lines[5], lines[70] = b'{"body": "caf\xe9"}', b'{"body": "\xff\xfe"}'
    (workdir / "mine.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    args = [*SMALL, "--data.corpus", "mine.jsonl", "--data.text_field", "body", "--run-dir", "runs/mine"]
    refused = _error(app(*args, cwd=workdir))
    assert "mine.jsonl, line 6: not UTF-8 text at byte" in refused
    trained = app(*args, "--data.invalid_utf8", "skip", cwd=workdir)
    assert trained.returncode == 0, trained.stderr
    assert "2 documents with invalid UTF-8 skipped" in trained.stderr
    assert "steps: 2" in trained.stdout
    (workdir / "mine.jsonl").write_bytes(b"\n".join(lines[:-1]) + b"\n")
    changed = _error(app(*args, "--data.invalid_utf8", "skip", cwd=workdir))
    assert re.search(r"mine\.jsonl changed .*; pass --data\.rebuild_corpus true to rebuild it$", changed), (
        changed
    )


def test_the_default_configs_tokenizer_is_never_a_path_the_user_did_not_type(workdir):
    (workdir / "empty.txt").write_text("")
    last = _error(app(*SMALL, "--data.corpus", "empty.txt", cwd=workdir))
    assert last == "error: empty.txt: no non-empty document to build from (1 file: 1 empty file)"
    no_tokenizer = _error(app(*SMALL, "--data.corpus", "empty.txt", "--data.tokenizer", "null", cwd=workdir))
    assert "--data.corpus needs a tokenizer: pass --data.tokenizer TOKENIZER_JSON (or stdlib)" in no_tokenizer


def test_the_docs_run_the_datastore_command_the_way_it_runs_in_the_workspace():
    """`python -m meltemi.datastore` needs the workspace's environment: the docs say `uv run` before it."""
    for path in DOCS:
        text = (ROOT / path).read_text()
        bare = [m.start() for m in re.finditer(r"python -m meltemi\.datastore", text)]
        assert all(text[:start].endswith("uv run ") for start in bare), path
