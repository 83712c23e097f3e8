"""apps/sft.py after the newcomer's first run, as the README shows it: the default fine-tuning of runs/tiny
on the standard library's chat corpus (generated offline on first use), its summary ending with the model's
replies before and after, then apps/chat.py talking with the result and printing only the reply.

The small model stands in for the default one (tests/app_runs.py's ``SMALL``), as in tests/test_apps.py.
"""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.app_runs import SMALL, app

pytestmark = pytest.mark.xdist_group("apps-sft")  # one fine-tuning run, read by every test here


@pytest.fixture(scope="module")
def fine_tuned(first_run, tmp_path_factory):
    """A copy of the first run's directory (its runs/tiny and its corpus), fine-tuned by the default
    command for 4 steps."""
    cwd = tmp_path_factory.mktemp("sft")
    shutil.copytree(first_run.cwd / "runs", cwd / "runs")
    first_run.link_corpus(cwd)
    done = app("sft.py", *SMALL, "--data.seq_len", "255", "--trainer.num_train_steps", "4", cwd=cwd)
    return cwd, done


def test_the_default_fine_tuning_starts_from_runs_tiny_and_ends_with_its_replies_before_and_after(fine_tuned):
    cwd, done = fine_tuned
    assert done.returncode == 0, done.stderr
    assert "writing the standard-library chat corpus" in done.stderr
    assert "initialized from runs/tiny/checkpoints/step-4" in done.stderr
    assert re.search(
        r"stdlib_chat: [\d,]+ conversations in [\d,]+ rows of 256 tokens, [\d.]+% filled", done.stderr
    )
    start, end = map(
        float,
        re.search(r"held-out assistant loss: ([\d.]+) at step 0 -> ([\d.]+) at step 4", done.stdout).groups(),
    )
    assert end < start
    assert "reply (greedy) to 'Describe this function." in done.stdout
    assert re.search(r"^  before: ", done.stdout, flags=re.MULTILINE) and re.search(
        r"^  after: ", done.stdout, flags=re.MULTILINE
    )
    assert (cwd / "runs" / "tiny_sft" / "checkpoints" / "step-4" / "COMMITTED").exists()
    assert not re.search(r"^step \d+/4", done.stdout, flags=re.MULTILINE)  # progress goes to stderr


def test_chat_prints_only_the_assistants_reply_and_reads_lines_without_a_message(fine_tuned):
    """A blank line is skipped; lines between triple quotes are one message; a line too long for the model
    is refused on stderr and the chat goes on. Each reply stops before a newline, so stdout holds a line per
    reply."""
    cwd, _ = fine_tuned
    first, second = "Describe this function:\n\ndef f():\n    pass", "And this one: def g(x): return x"
    pasted = f'"""{first}\n"""\n'  # as typed or piped: the code's lines are one message
    one_line = ("--max-new-tokens", "8", "--stop", "\\n")
    once = app(
        "chat.py", "--message", "-", *one_line, cwd=cwd, stdin=f"{first}\n"
    )  # runs/tiny_sft by default
    assert once.returncode == 0, once.stderr
    assert once.stdout.count("\n") == 1 and "<|" not in once.stdout  # the reply, no special token
    saving = f"{pasted}{second}\n/save chat.json\n"
    looped = app("chat.py", "--checkpoint", "runs/tiny_sft", *one_line, cwd=cwd, stdin=saving)
    assert looped.returncode == 0, looped.stderr
    assert looped.stdout.startswith(once.stdout)  # the pasted function's reply, greedy, then the second's
    assert looped.stdout.count("\n") == 2  # two messages: the function's lines are one
    replies = looped.stdout.splitlines()
    assert json.loads((cwd / "chat.json").read_text()) == [
        {"role": "user", "content": first},
        {"role": "assistant", "content": replies[0]},
        {"role": "user", "content": second},
        {"role": "assistant", "content": replies[1]},
    ]  # what /save wrote: the conversation as the model saw it and answered
    too_long = "word " * 1000
    noisy = app("chat.py", "--checkpoint", "runs/tiny_sft", *one_line, cwd=cwd,
                stdin=f"{pasted}\n{too_long}\n{second}\n")  # fmt: skip
    assert noisy.returncode == 1 and noisy.stdout == looped.stdout  # no reply to the blank or the long line
    errors = [line for line in noisy.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "exceeds model.max_seq_len" in errors[0], noisy.stderr


def test_chat_sends_the_lines_between_triple_quotes_as_one_message(monkeypatch, capsys, tmp_path):
    """What apps/chat.py hands the session, from piped lines (the model stands aside: a session that
    records each message and answers ``ok``)."""
    import io
    import runpy
    from pathlib import Path

    from meltemi.trainer.generate.chat import ChatSession

    said = []

    class Recording:
        forgotten = 0

        def say(self, message, write, role="user"):
            said.append(message)
            write("ok")

    monkeypatch.setattr(ChatSession, "of_checkpoint", classmethod(lambda cls, *args, **kwargs: Recording()))
    monkeypatch.setattr("sys.stdin", io.StringIO('Hi\n\n"""Describe this:\n\ndef f():\n    pass\n"""\nBye\n'))
    main = runpy.run_path(str(Path(__file__).parents[1] / "apps" / "chat.py"))["main"]
    assert main(["--checkpoint", str(tmp_path)]) == 0
    assert said == ["Hi", "Describe this:\n\ndef f():\n    pass", "Bye"]
    assert capsys.readouterr().out == "ok\nok\nok\n"


def test_chat_goes_on_with_a_saved_conversation_and_sends_tool_results(monkeypatch, capsys, tmp_path):
    """What apps/chat.py hands the session for ``--conversation`` (its messages, then a reply to its last
    message, a tool's) and for a ``/tool`` line (a tool message); a second set of tools is refused."""
    import io
    import json
    import runpy
    from pathlib import Path

    from meltemi.trainer.generate.chat import ChatSession

    calls, opened = [], []

    class Recording:
        forgotten, history = 0, []

        def go_on(self, messages):
            calls.append(("go_on", [m["role"] for m in messages]))
            self.history = list(messages)

        @property
        def awaits_reply(self):
            return self.history[-1]["role"] in ("user", "tool")

        def answer(self, write):
            calls.append(("answer",))
            write("ok")

        def say(self, message, write, role="user"):
            calls.append((role, message))
            write("ok")

    def of_checkpoint(cls, *args, tools=None, **kwargs):
        opened.append(tools)
        return Recording()

    monkeypatch.setattr(ChatSession, "of_checkpoint", classmethod(of_checkpoint))
    add = {"type": "function", "function": {"name": "add"}}
    said = [{"role": "user", "content": "Add 2 and 3."}, {"role": "tool", "content": "5"}]
    (tmp_path / "chat.json").write_text(json.dumps({"messages": said, "tools": [add]}))
    (tmp_path / "tools.json").write_text(json.dumps([add]))
    monkeypatch.setattr("sys.stdin", io.StringIO('/tool {"sum": 8}\n"""/tool\n[1,\n2]"""\n/tools?\n'))
    main = runpy.run_path(str(Path(__file__).parents[1] / "apps" / "chat.py"))["main"]
    assert main(["--checkpoint", str(tmp_path), "--conversation", str(tmp_path / "chat.json")]) == 0
    assert opened == [(add,)]  # the conversation's own tools
    assert calls == [("go_on", ["user", "tool"]), ("answer",), ("tool", '{"sum": 8}'), ("tool", "[1,\n2]"),
                     ("user", "/tools?")]  # fmt: skip
    assert capsys.readouterr().out == "ok\n" * 4
    both = ["--checkpoint", str(tmp_path), "--conversation", str(tmp_path / "chat.json"), "--tools",
            str(tmp_path / "tools.json")]  # fmt: skip
    assert main(both) == 1
    assert (
        "chat.json holds its own tools: give them there or with --tools, not both" in capsys.readouterr().err
    )


def test_chat_commands_save_clear_and_end_the_conversation_and_a_mistyped_one_reaches_no_model(
    monkeypatch, capsys, tmp_path
):
    """What apps/chat.py does with the prompt loop's commands (the model stands aside: a session that
    records each message and answers ``ok``): ``/save`` writes the whole conversation, replacing only its
    own file, never the file of the conversation before ``/clear`` nor another (each refusal names the file
    and ``/save!``, which replaces it); ``/clear`` forgets it; ``/bye`` ends the loop; ``//`` sends a
    message beginning with ``/``."""
    import io
    import json
    import runpy
    from pathlib import Path

    from meltemi.trainer.generate.chat import ChatSession

    class Recording:
        forgotten, tools = 0, None

        def __init__(self):
            self.said = []

        def say(self, message, write, role="user"):
            self.said += [{"role": role, "content": message}, {"role": "assistant", "content": "ok"}]
            write("ok")

        @property
        def transcript(self):
            return list(self.said)

        def clear(self):
            self.said = []

    monkeypatch.setattr(ChatSession, "of_checkpoint", classmethod(lambda cls, *args, **kwargs: Recording()))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "x").mkdir(parents=True)  # a place the app's check finds; the session stands in
    (tmp_path / "other.json").write_text("[]")
    main = runpy.run_path(str(Path(__file__).parents[1] / "apps" / "chat.py"))["main"]

    def chat(*typed):
        monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(typed) + "\n"))
        status = main(["--checkpoint", "runs/x"])
        return status, capsys.readouterr()

    def held(name):
        return [m["content"] for m in json.loads((tmp_path / name).read_text())]

    status, shown = chat("/save", "Hi", "/help", "/save chat.json", "/sav x", "/clear", "//bye is a word",
                         "/save", "/save ./chat.json", "/save other.json", "/bye", "never sent")  # fmt: skip
    assert status == 1  # five commands failed; the chat went on
    assert shown.out == "ok\nok\n"
    assert held("chat.json") == ["Hi", "ok"]  # the conversation before /clear is kept
    assert (tmp_path / "other.json").read_text() == "[]"
    errors = [line for line in shown.err.splitlines() if line.startswith("error: ")]
    before_clear = "holds the conversation before /clear (what it holds is kept); /save another name, or"
    assert errors == [
        "error: /save needs its FILE: no conversation file was read or saved yet",
        "error: /sav: no such command; /help lists them (a message that begins with / is written //)",
        f"error: /save chat.json: {before_clear} /save! chat.json to replace it",  # /save alone: the last
        f"error: /save ./chat.json: {before_clear} /save! ./chat.json to replace it",
        "error: /save other.json: already exists, and this chat neither read nor saved it (what it holds is "
        "kept); /save another name, or /save! other.json to replace it",
    ]
    assert "  /save [FILE]  " in shown.err and "(also /exit, /quit)" in shown.err  # the help
    assert re.search(r"  /save! \[FILE\] +the same, replacing what FILE holds", shown.err)
    assert shown.err.count("saved 2 messages to chat.json") == 1
    assert "go on with it: uv run apps/chat.py --checkpoint runs/x --conversation chat.json" in shown.err
    assert "a new conversation (the system message and tools kept)" in shown.err

    status, shown = chat("Hi", "/save mine.json", "/clear", "Again", "/save new.json", "/save", "/clear",
                         "Last", "/save! ./mine.json", "/save", "/save! other.json")  # fmt: skip
    assert status == 0, shown.err
    assert held("new.json") == ["Again", "ok"] and shown.err.count("saved 2 messages to new.json") == 2
    assert held("mine.json") == held("other.json") == ["Last", "ok"]  # replaced as asked
    assert shown.err.count("saved 2 messages to ./mine.json") == 2  # /save alone: its own file again


def test_at_a_terminal_ctrl_c_stops_a_reply_and_the_chat_goes_on_and_piped_it_ends_the_chat(
    capsys, monkeypatch
):
    """Ctrl-C while the model writes (a KeyboardInterrupt from the session) stops that reply only when the
    chat is typed; at the prompt it drops the line and says how to end."""
    import runpy
    from pathlib import Path

    app_module = runpy.run_path(str(Path(__file__).parents[1] / "apps" / "chat.py"))
    said = []

    class Interrupted:
        forgotten = 0

        def say(self, message, write, role="user"):
            if message == "ramble":
                write("and so on")
                raise KeyboardInterrupt
            said.append(message)
            write("ok")

    typed = app_module["_Chat"](Interrupted(), "runs/x", None, typed=True)
    assert typed.converse(["Hi", "ramble", "Bye"], write=lambda text: print(text, end="")) == 0
    assert said == ["Hi", "Bye"]
    shown = capsys.readouterr()
    assert shown.out == "ok\nand so on\nok\n"
    assert "stopped: this exchange is left out of the conversation" in shown.err
    piped = app_module["_Chat"](Interrupted(), "runs/x", None)
    with pytest.raises(KeyboardInterrupt):
        piped.converse(["ramble", "never"], write=lambda text: None)
    answers = iter([KeyboardInterrupt, "Hi", EOFError])

    def typed_line(prompt):
        answer = next(answers)
        if isinstance(answer, type):
            raise answer
        return answer

    monkeypatch.setattr("builtins.input", typed_line)
    assert list(app_module["_typed"](lambda: False)) == ["Hi"]
    assert "(Ctrl-D or /bye ends the chat)" in capsys.readouterr().err


def test_the_fine_tuning_command_lists_its_own_flags_and_the_others_refuse_them(fine_tuned):
    cwd, _ = fine_tuned
    shown = app("sft.py", "--help", cwd=cwd)
    assert shown.returncode == 0 and "fine-tuning flags:" in shown.stdout
    assert "--base RUN_OR_HF_DIR" in shown.stdout and "--data PATHS" in shown.stdout
    refused = app("pretrain.py", "--base", "runs/tiny", cwd=cwd)
    assert refused.returncode == 1
    assert (
        refused.stderr.strip() == "error: --base: a flag of apps/sft.py; here, set --trainer.initialize_from"
    )


def test_a_base_that_is_not_a_model_is_one_line_and_writes_nothing(fine_tuned):
    cwd, _ = fine_tuned
    (cwd / "notes").mkdir(exist_ok=True)
    (cwd / "notes" / "todo.txt").write_text("not a model\n")
    refused = app("sft.py", *SMALL, "--base", "notes", "--run-dir", "runs/none", cwd=cwd)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: trainer.initialize_from: notes is neither a run")
    assert not (cwd / "runs" / "none").exists()
    pretraining = Path(__file__).parents[1] / "configs" / "tiny.yaml"  # no base: it would start from noise
    refused = app("sft.py", "--config", str(pretraining), "--run-dir", "runs/none", cwd=cwd)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: --config {pretraining} names no base model to fine-tune (trainer.initialize_from): give one "
        "with --base RUN_OR_HF_DIR, or train a model from scratch with apps/pretrain.py"
    )
    assert not (cwd / "runs" / "none").exists()


def test_forty_conversations_of_your_own_fine_tune_with_the_defaults(first_run, tmp_path):
    """A user's small file (40 conversations, their messages under `dialog`): the default held-out split
    (2 conversations, one row) is evaluated as one partial batch, the training rows fewer than a batch are
    said at the start and in the summary, and the replies before and after are to the first held-out
    conversation's message, not to the preset's prompt about the standard library."""
    shutil.copytree(first_run.cwd / "runs", tmp_path / "runs")
    first_run.link_corpus(tmp_path)
    sums = [(n, 2 * n + 1) for n in range(40)]
    (tmp_path / "mine.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "dialog": [
                        {"role": "user", "content": f"What is {a} plus {b}?"},
                        {"role": "assistant", "content": str(a + b)},
                    ]
                }
            )
            + "\n"
            for a, b in sums
        )  # fmt: skip
    )
    done = app("sft.py", *SMALL, "--data.seq_len", "255", "--trainer.num_train_steps", "4",
               "--data", "mine.jsonl", "--run-dir", "runs/mine", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"mine: 38 conversations in \d rows of 256 tokens", done.stderr)
    assert re.search(r"held-out assistant loss: [\d.]+ at step 0 -> [\d.]+ at step 4", done.stdout)
    said = re.search(
        r"source 'mine' trains on \d rows?, fewer than a batch of 8 [^\n]*: add data", done.stderr
    )
    assert said and f"data: {said.group(0)}" in done.stdout
    assert "reply (greedy) to 'What is 38 plus 77?':" in done.stdout  # the first of the 2 held out
    assert "Describe this function" not in done.stdout
