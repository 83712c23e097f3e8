"""The command line: builds, prints a summary, and turns user errors into one message and exit status 1."""

import io
import json
import subprocess
import sys

import pytest

from meltemi.datastore import TokenStore, build_store
from meltemi.datastore.cli import main
from meltemi.datastore.progress import Progress, ProgressBar, human


def test_build_then_info_from_the_command_line(tmp_path, write_files, tokenizer_path, capsys):
    files = write_files({"a.jsonl": '{"body": "one"}\n{"body": "two"}\n'})
    argv = ["build", "--input", *files, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    assert main([*argv, "--text-field", "body", "--no-eos", "--workers", "1", "--chunk-tokens", "1000"]) == 0
    assert "built 2 docs" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "s")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (
        info["counts"]["documents"] == 2
        and TokenStore.open(tmp_path / "s").manifest["options"]["eos"] is False
    )
    assert info["tokens"]["chunk"] == 1000 and info["tokens"]["shard"] == 1000 * (2**20 // 1000)
    again = ["build", "--input", *files, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "t")]
    assert main([*again, "--chunk-tokens", "10", "--shard-tokens", "25"]) == 1
    assert "multiple of chunk_tokens (10), got 25" in capsys.readouterr().err


def test_user_errors_are_one_line_without_a_traceback(tmp_path, tokenizer_path):
    command = [sys.executable, "-m", "meltemi.datastore", "build", "--input", str(tmp_path / "absent.txt")]
    command += ["--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.startswith("error: input") and "absent.txt" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_incomplete_store_error_tells_how_to_finish(tmp_path, write_files, tokenizer_path, capsys):
    files = write_files({"a.txt": "x"})
    argv = ["build", "--input", *files, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    assert main(argv) == 0
    (tmp_path / "s" / "manifest.json").unlink()
    (tmp_path / "s" / ".build" / "parts").mkdir(parents=True)
    (tmp_path / "s" / ".build" / "plan.json").write_text(json.dumps({"units": [[0, 1]], "command": "again"}))
    assert main(["info", str(tmp_path / "s")]) == 1
    assert "incomplete token store" in capsys.readouterr().err


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_draws_only_on_a_terminal():
    terminal, pipe = FakeTerminal(), io.StringIO()
    for stream in (terminal, pipe):
        with ProgressBar(4, "tokenizing", stream=stream, min_interval=0) as bar:
            bar.advance(1, documents=10, tokens=2_500_000)
            bar.advance(3, documents=5, tokens=500_000)
    assert pipe.getvalue() == ""
    last = terminal.getvalue().rstrip("\n").split("\r")[-1]
    assert "4/4" in last and "15 docs" in last and "3M tokens" in last and "tokens/s" in last
    assert "#" * ProgressBar.WIDTH in last


def test_human_counts():
    assert [human(x) for x in (7, 1_234, 5_600_000, 2e9)] == ["7", "1.23k", "5.6M", "2G"]


def test_the_progress_bar_stays_silent_when_disabled():
    terminal = FakeTerminal()
    with ProgressBar(2, "tokenizing", stream=terminal, enabled=False) as bar:
        bar.advance(2, documents=1, tokens=1)
    assert terminal.getvalue() == ""


def test_a_build_gives_each_moment_of_its_progress_to_a_function_and_draws_nothing(
    stdlib_files, tokenizer_path, tmp_path, capsys
):
    seen: list[Progress] = []
    report = build_store(
        stdlib_files[:6], tokenizer_path, tmp_path / "store", workers=1, progress=seen.append
    )
    assert capsys.readouterr().err == ""
    stages = [p.stage for p in seen]
    assert "tokenizing" in stages and "assembling" in stages
    assert stages.index("assembling") > max(i for i, stage in enumerate(stages) if stage == "tokenizing")
    tokenized = [p for p in seen if p.stage == "tokenizing" and p.ended]
    assert len(tokenized) == 1 and tokenized[0].done == tokenized[0].total
    assert (tokenized[0].documents, tokenized[0].tokens) == (report.documents, report.tokens)
    assert all(p.done <= p.total for p in seen) and seen[-1].ended


def test_verify_reads_everything_and_catches_a_chunk_rewritten_with_its_checksum(
    small_store, tmp_path, capsys
):
    import shutil

    import numpy as np
    import tensorstore as ts

    assert main(["verify", str(small_store)]) == 0
    assert "check out" in capsys.readouterr().out
    copy = shutil.copytree(small_store, tmp_path / "copy")
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(copy / "tokens")}}
    array = ts.open(spec).result()
    first_shard = array[:8000].read().result()
    array[:8000].write(np.roll(first_shard, 1)).result()  # valid chunks and checksums, wrong values
    assert len(TokenStore.open(copy).tokens[:8000]) == 8000
    assert main(["verify", str(copy)]) == 1
    error = capsys.readouterr().err
    assert "values of 'tokens' do not match the manifest's SHA-256" in error
    shutil.copy(small_store / "tokens" / "c" / "0", copy / "tokens" / "c" / "0")
    assert main(["verify", str(copy)]) == 0
    (copy / "offsets" / "c" / "0").write_bytes(b"")
    assert main(["verify", str(copy)]) == 1
    assert "offsets/c/0" in capsys.readouterr().err


def test_info_and_verify_of_a_regular_file_say_it_is_a_file(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("not a store")
    expected = f"error: {path} is a file, not a token store (a token store is a directory with manifest.json)"
    for command in ("info", "verify"):
        assert main([command, str(path)]) == 1
        assert capsys.readouterr().err == expected + "\n"


def test_the_help_is_written_for_users(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    assert "User errors" not in shown and "Build a deterministic token store" in shown
