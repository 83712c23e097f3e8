"""Inputs a build repairs or stops at: named, so a user can find them, and never a dead end."""

import inspect
from pathlib import Path

import pytest

from meltemi.datastore import BadLineError, IncompleteStoreError, SourceChangedError, TokenStore, build_store
from meltemi.datastore.build.request import BUILD_FLAGS, BuildRequest
from meltemi.datastore.cli import main


def test_files_with_invalid_utf8_are_named_in_the_summary_and_all_of_them_in_the_manifest(
    write_files, tmp_path, tokenizer_path
):
    bad = {f"bad{i}.txt": b"caf\xe9 " + str(i).encode() for i in range(5)}
    files = write_files({"good.txt": "fine", **bad, "e.jsonl": b'{"text": "x\xff"}\n'})
    report = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    named = sorted(f for f in files if "bad" in f or f.endswith(".jsonl"))
    assert report.invalid_utf8_files == named
    assert TokenStore.open(tmp_path / "s").manifest["invalid_utf8_files"] == named
    summary = report.summary()
    assert f"invalid UTF-8 in: {'; '.join(named[:3])} and 3 more (all in manifest.json)" in summary
    again = build_store(files, tokenizer_path, tmp_path / "s", invalid_utf8="replace", progress=False)
    assert again.already_built and again.invalid_utf8_files == named


def test_a_bad_line_stops_the_build_saying_how_to_fix_or_skip_it_and_resume(
    write_files, tmp_path, tokenizer_path, capsys
):
    lines = ['{"text": "one"}', "not json", '{"text": "three"}', '{"body": "four"}', '{"text": "five"}']
    files = write_files({"a.txt": "first file", "b.jsonl": "\n".join(lines) + "\n", "c.txt": "last"})
    out = tmp_path / "s"
    with pytest.raises(BadLineError) as stopped:
        build_store(files, tokenizer_path, out, progress=False, unit_bytes=1)
    message = str(stopped.value)
    assert "b.jsonl, line 2: not valid JSON" in message
    assert "Fix that line and run the build again" in message and "--skip-bad-lines" in message
    with pytest.raises(IncompleteStoreError) as half_built:
        TokenStore.open(out)
    said = str(half_built.value)
    assert "at a bad input: " in said and "b.jsonl, line 2: not valid JSON" in said
    assert "--skip-bad-lines" in said and "Finish it by running the build again" not in said
    assert main(["info", str(out)]) == 1 and "b.jsonl, line 2" in capsys.readouterr().err

    report = build_store(files, tokenizer_path, out, progress=False, unit_bytes=1, skip_bad_lines=True)
    assert report.documents == 5 and report.counts["skipped_lines"] == 2
    assert [line.split("b.jsonl, ")[1] for line in report.skipped_lines] == [
        "line 2: not valid JSON (Expecting value at column 1)",
        "line 4: no 'text' field (pass --text-field FIELD to name another)",
    ]
    manifest = TokenStore.open(out).manifest
    assert manifest["skipped_lines"] == report.skipped_lines and manifest["counts"]["skipped_lines"] == 2


def test_fixing_the_bad_line_and_running_the_build_again_finishes_it_as_the_error_says(
    write_files, tmp_path, tokenizer_path
):
    files = write_files({"a.txt": "first file", "b.jsonl": '{"text": "one"}\nnot json\n', "c.txt": "last"})
    out = tmp_path / "s"
    again = r"Fix that line and run the build again \(.*\) \(the build starts over from the fixed file\), or"
    with pytest.raises(BadLineError, match=again):
        build_store(files, tokenizer_path, out, progress=False, unit_bytes=1)
    Path(files[1]).write_text('{"text": "one"}\n{"text": "two, fixed"}\n')
    report = build_store(files, tokenizer_path, out, progress=False, unit_bytes=1)
    build_store(files, tokenizer_path, tmp_path / "fresh", progress=False, unit_bytes=1)
    assert report.documents == 4
    assert TokenStore.open(out).content_hash == TokenStore.open(tmp_path / "fresh").content_hash
    more = [*files, str(Path(files[0]).with_name("d.jsonl"))]
    Path(more[-1]).write_text("[1]\n")
    with pytest.raises(BadLineError):  # stopped again: now another corpus meets the half-built store
        build_store(more, tokenizer_path, tmp_path / "t", progress=False)
    with pytest.raises(SourceChangedError, match="is no longer among the inputs"):
        build_store(files[:2], tokenizer_path, tmp_path / "t", progress=False)


def test_skip_bad_lines_from_the_command_line(write_files, tmp_path, tokenizer_path, capsys):
    files = write_files({"b.jsonl": '{"text": "one"}\n[1]\n'})
    argv = ["build", "--input", *files, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    assert main(argv) == 1
    assert "--skip-bad-lines" in capsys.readouterr().err
    assert main([*argv, "--skip-bad-lines"]) == 0
    assert "1 skipped line" in capsys.readouterr().out


def test_the_command_line_and_build_store_share_one_set_of_options_and_defaults():
    fields = {f for f in inspect.signature(BuildRequest).parameters}
    assert {flag.field for flag in BUILD_FLAGS} == fields
    signature = inspect.signature(build_store).parameters
    # how this call behaves, not the store; and `recipe`, the five chat options given whole as one object
    assert set(signature) - {"progress", "wait", "recipe"} == fields
    for name in fields:
        assert signature[name].default == inspect.signature(BuildRequest).parameters[name].default, name


def test_the_resume_command_spells_out_every_option_that_is_not_the_default():
    request = BuildRequest(
        ("a b.jsonl", "https://u:secret@host/c.jsonl"), "tok.json", "out", text_field="body", eos=False,
        eos_token="</s>", overwrite=True, chunk_tokens=64, shard_tokens=128, unit_bytes=99, workers=3,
        invalid_utf8="replace",
    )  # fmt: skip
    assert request.command() == (
        "python -m meltemi.datastore build --input 'a b.jsonl' 'https://***@host/c.jsonl' "
        "--tokenizer tok.json --out out --text-field body --workers 3 --no-eos --eos-token '</s>' "
        "--chunk-tokens 64 --shard-tokens 128 --unit-bytes 99 --invalid-utf8 replace"
    )
    recorded = BuildRequest(("a",), "t", "o").options().to_json()  # what plans and manifests keep
    sizes = {"chunk_tokens": 1024, "shard_tokens": 1 << 20, "unit_bytes": 4 << 20}
    assert recorded == {"text_field": "text", "eos": True} | sizes


def test_a_chat_option_on_a_text_build_is_refused_naming_it_before_any_work(tmp_path, tokenizer_path, capsys):
    argv = ["build", "--input", tokenizer_path, "--tokenizer", tokenizer_path, "--out", str(tmp_path / "s")]
    assert main([*argv, "--loss-on", "all", "--overlong", "drop", "--chat-template", "llama3"]) == 1
    assert capsys.readouterr().err == (
        "error: loss_on, overlong (--loss-on, --overlong): options of a chat store, and this build is text; "
        "build a chat store with format='chat' (--format chat)\n"
    )
    assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match=r"^max_tokens \(--max-tokens\): options of a chat store"):
        BuildRequest(("a",), "t", "o", max_tokens=64)
    assert BuildRequest(("a",), "t", "o", format="chat", max_tokens=64).max_tokens == 64
