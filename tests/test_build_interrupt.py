"""Ctrl-C during a chat store's build, in a process that has imported JAX as the trainer has when it builds
one: the build stops between units with one line saying what it kept and how to go on, no traceback, and
the same command resumes it from the units it kept, making the store an uninterrupted build makes.

JAX's garbage-collection callback is what swallowed the interrupt before (Python printed it as "ignored",
with a JAX traceback, and the build went on); the child process slows each unit down so that the signal
comes mid-build.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import os, sys, time
import jax  # noqa: F401  (as apps/sft.py has it: its gc callback is installed)
from meltemi.datastore.build import builder
from meltemi.datastore.cli import main

tokenize_units = builder.tokenize_units

def slowly(*args):
    time.sleep(float(os.environ["SECONDS_PER_UNIT"]))
    return tokenize_units(*args)

builder.tokenize_units = slowly
sys.exit(main(sys.argv[1:]))
"""


def _conversations(path: Path) -> str:
    """About 1.5 MB of conversations about stdlib functions (the first files' ones, repeated with a mark)."""
    from meltemi.datastore import corpora
    from meltemi.datastore.chat.stdlib import stdlib_chat

    one = stdlib_chat(path.parent / "one.jsonl", files=corpora.python_stdlib()[:40])
    lines = Path(one).read_text().splitlines()
    with path.open("w") as out:
        for copy in range(1 + 1_500_000 // sum(map(len, lines))):
            for line in lines:
                record = json.loads(line)
                record["messages"][0]["content"] += f" ({copy})"
                out.write(json.dumps(record) + "\n")
    return str(path)


def test_ctrl_c_during_a_chat_build_keeps_its_units_says_so_in_one_line_and_the_rerun_skips_them(tmp_path):
    from meltemi.datastore import TokenStore, build_store, corpora

    tokenizer = corpora.train_tokenizer(corpora.python_stdlib()[:40], vocab_size=400, out=tmp_path / "t.json")
    data, out = _conversations(tmp_path / "chat.jsonl"), tmp_path / "store"
    (tmp_path / "child.py").write_text(CHILD)
    command = [sys.executable, str(tmp_path / "child.py"), "build", "--input", data, "--tokenizer", tokenizer,
               "--out", str(out), "--format", "chat", "--unit-bytes", "65536"]  # fmt: skip
    parts = out / ".build" / "parts"

    child = subprocess.Popen(
        command,
        env=os.environ | {"SECONDS_PER_UNIT": "0.3"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, signalled as a terminal signals its foreground job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # not ignored, as a shell's & would
    )
    deadline = time.monotonic() + 120
    while len(list(parts.glob("*.json"))) < 3 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(child.pid, signal.SIGINT)  # `uv run` forwards a copy of the terminal's: the same request
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    line = r"^interrupted: (\S+) keeps (\d+) of its (\d+) units tokenized \(under \.build/\); the same "
    stopped = re.search(line + r"command resumes the build from there$", stderr, re.MULTILINE)
    assert stopped is not None, stderr
    said, units = int(stopped[2]), int(stopped[3])
    kept = len(list(parts.glob("*.json")))
    assert 3 <= said <= kept < units  # the unit in progress when it stopped was finished and kept too
    assert not (out / "manifest.json").exists()

    fast = os.environ | {"SECONDS_PER_UNIT": "0"}
    resumed = subprocess.run(command, env=fast, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming the build of {out}: {kept} of its {units} units were tokenized before" in resumed.stderr
    assert f"; went on from {kept} units an earlier build made" in resumed.stdout
    whole = build_store(data, tokenizer, tmp_path / "whole", format="chat", unit_bytes=65536, progress=False)
    assert whole.kept_units == 0
    hashes = [TokenStore.open(store).manifest["content_sha256"] for store in (out, whole.out)]
    assert hashes[0] == hashes[1]  # the store an uninterrupted build makes
