"""Talk with a chat model (apps/sft.py's, or a Hugging Face one); only the assistant's reply goes to stdout.

    uv run apps/chat.py --message "Describe json.dumps" [--temperature 0]     # runs/tiny_sft, apps/sft.py's
    uv run apps/chat.py --checkpoint RUN [--system TEXT]            # a prompt loop: one reply per message
    uv run apps/chat.py --checkpoint Qwen/Qwen3-0.6B --tools tools.json --message "What is 2 + 3?"
    uv run apps/chat.py --checkpoint Qwen/Qwen3-0.6B --conversation chat.json   # goes on with a conversation

``--checkpoint`` is a run directory (its latest good checkpoint), a ``step-N`` directory or a Hugging Face
directory with a chat template (``apps/export_hf.py``'s, or one ``transformers`` saved), local or in a
bucket (``s3://``, ``gs://``); by default ``runs/tiny_sft``, where ``uv run apps/sft.py`` writes. The
conversation is rendered by the chat template the checkpoint records (as ``transformers``'
``apply_chat_template`` renders it with the exported tokenizer) and the reply stops at the end of the
assistant's turn; the reply is written as it is generated. Without ``--message`` each non-blank line read from
stdin (at a terminal, after a ``>`` prompt, with line editing) is a user message, answered in the same
conversation, until end of input; lines between ``\"\"\"`` and ``\"\"\"`` are one message (paste code so; the
prompt is ``...`` meanwhile). When the conversation outgrows the model's positions its oldest exchanges
are left out of the prompt (said on stderr), and a line too long even alone is refused on stderr while the
conversation goes on. A line whose first word is ``/`` and a command's name is a command (``/help`` lists
them): ``/save FILE`` writes the conversation so far as JSON, which ``--conversation FILE`` goes on with
(``/save`` alone: to the file read or saved last; a file holding anything else, the conversation before
``/clear`` included, is kept and named, and ``/save! FILE`` replaces it),
``/clear`` starts a new one, ``/bye`` ends the chat; ``//`` begins a message that begins with ``/``.
``--tools`` shows the model tool definitions (a JSON list, as transformers'
``apply_chat_template(..., tools=...)`` takes them) at every turn; a reply that calls one is written as
the model writes it (in its template's layout), and a template that never reads tools is refused;
``/tool RESULT`` is the called tool's result (a ``tool`` message), which the model answers as it answers a
user's. ``--conversation`` goes on with a
conversation saved as JSON (a list of messages as ``apply_chat_template`` takes them, tool calls and
results included, or a chat data set's record with its ``messages`` and ``tools``): ``--message`` or the
prompt loop continues it, and when it ends with a user's or a tool's message the model first replies to
that.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Iterable

from meltemi.trainer.generate.flags import (
    FINE_TUNED,
    add_checkpoint_flag,
    add_dtype_flag,
    add_sampling_flags,
    checkpoint_of,
    refuse_unknown,
    sampling_settings,
    text_or_stdin,
)
from meltemi.trainer.generate.user_input import UserMessages


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser, FINE_TUNED)
    add_dtype_flag(parser)
    parser.add_argument(
        "--message",
        type=text_or_stdin,
        default=None,
        help="the user's message, or - to read it all from stdin (default: a prompt loop, a message per "
        "line of stdin)",
    )
    parser.add_argument(
        "--system", default=None, help="a system message opening the conversation (default: none)"
    )
    parser.add_argument(
        "--tools",
        default=None,
        metavar="FILE",
        help="a JSON file of tool definitions the model is shown, as apply_chat_template's tools (local or "
        "in a bucket); its calls are written as it writes them (default: none)",
    )
    parser.add_argument(
        "--conversation",
        default=None,
        metavar="FILE",
        help="a JSON file of the conversation so far (a list of messages, or a record with messages and "
        "tools; local or in a bucket), which --message or the prompt loop continues (default: none)",
    )
    add_sampling_flags(parser, max_new_tokens=256, temperature=0.0)
    args, unknown = parser.parse_known_args(argv)
    refuse_unknown(parser, unknown)
    checkpoint = checkpoint_of(parser, args)

    from meltemi.datastore import DatastoreError
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.generate.chat import ChatSession
    from meltemi.trainer.generate.chat_files import read_conversation, read_tools
    from meltemi.trainer.generate.sampling import GenerationError, SamplingConfig
    from meltemi.trainer.generate.streaming import to_stdout

    try:
        settings = SamplingConfig(*sampling_settings(args))
        tools = None if args.tools is None else read_tools(args.tools)
        earlier = None if args.conversation is None else read_conversation(args.conversation)
        if earlier is not None and earlier.tools is not None:
            if tools is not None:
                raise GenerationError(
                    f"--conversation {args.conversation} holds its own tools: give them there or with "
                    "--tools, not both"
                )
            tools = earlier.tools
        session = ChatSession.of_checkpoint(
            checkpoint,
            settings,
            system=args.system,
            forget_oldest=args.message is None,  # a conversation goes on when it outgrows the model
            warn=lambda m: print(m, file=sys.stderr),
            dtype=args.dtype,
            tools=tools,
            weights=args.weights,
        )
        if earlier is not None:
            session.go_on(earlier.messages)
        if args.message is not None:
            session.say(args.message, write=to_stdout)
            print()
            return 0
        if earlier is not None and session.awaits_reply:
            session.answer(write=to_stdout)
            print(flush=True)
        messages = UserMessages(sys.stdin)
        typed = sys.stdin.isatty() and sys.stdout.isatty()
        if typed:
            messages.lines = _typed(lambda: messages.open)
            print(
                f"chatting with {checkpoint}: /help lists the commands; Ctrl-C stops a reply; Ctrl-D or /bye "
                "ends",
                file=sys.stderr,
            )
        chat = _Chat(session, str(checkpoint), args.conversation, typed=typed)
        return chat.converse(messages, write=to_stdout)
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


class _Chat:
    """The prompt loop: one reply per message (a user's, or after ``/tool`` a tool's result), each written
    by ``write`` as it grows, and the commands (``generate.chat_commands``). A message the model cannot take
    or a command that fails is said on stderr and the conversation goes on without it (exit status 1 at
    the end). ``/save`` replaces only the file the conversation came from or one it saved before (after
    ``/clear`` the files of the conversation before are another's: ``/save!`` replaces them). When
    ``typed`` (at a terminal), Ctrl-C during a reply stops it, and the conversation goes on without that
    exchange; otherwise it ends the chat."""

    def __init__(self, session, checkpoint: str, conversation_file: str | None, *, typed: bool = False):
        self.session, self.checkpoint, self.typed = session, checkpoint, typed
        self.ours = set() if conversation_file is None else {_url(conversation_file)}  # this conversation's
        self.earlier: set[str] = set()  # the files of the conversations before /clear
        self.last_file = conversation_file  # where /save alone writes

    def converse(self, messages: Iterable[str], write) -> int:
        from meltemi.datastore import DatastoreError
        from meltemi.trainer.generate.chat_commands import Command, read_command
        from meltemi.trainer.generate.sampling import GenerationError

        status = 0
        for message in messages:
            try:
                said = read_command(message)
                if not isinstance(said, Command):
                    self._reply(said, "user", write)
                elif said.name == "tool":
                    self._reply(said.argument, "tool", write)
                elif said.name == "bye":
                    break
                else:
                    self._obey(said)
            except (GenerationError, DatastoreError) as e:
                print(f"error: {e}", file=sys.stderr, flush=True)
                status = 1
        return status

    def _reply(self, message: str, role: str, write) -> None:
        forgotten = self.session.forgotten
        try:
            self.session.say(message, write=write, role=role)
        except KeyboardInterrupt:
            if not self.typed:
                raise
            print(flush=True)
            print("stopped: this exchange is left out of the conversation", file=sys.stderr, flush=True)
            return
        left_out = self.session.forgotten - forgotten
        if left_out:
            pairs = "exchange" if left_out == 1 else f"{left_out} exchanges"
            note = f"note: the conversation outgrew model.max_seq_len: its oldest {pairs} left out"
            print(note, file=sys.stderr)
        print(flush=True)

    def _obey(self, command) -> None:
        from meltemi.trainer.generate.chat_commands import ChatCommandError, command_help
        from meltemi.trainer.generate.chat_files import write_conversation

        if command.name == "help":
            print(command_help(), file=sys.stderr, flush=True)
        elif command.name == "clear":
            self.session.clear()
            self.earlier |= self.ours  # they hold the conversation just ended: /save! replaces them
            self.ours = set()
            print("a new conversation (the system message and tools kept)", file=sys.stderr, flush=True)
        elif command.name in ("save", "save!"):
            target = command.argument or self.last_file
            if target is None:
                raise ChatCommandError(
                    f"/{command.name} needs its FILE: no conversation file was read or saved yet"
                )
            url, said, forced = _url(target), self.session.transcript, command.name == "save!"
            write_conversation(
                target,
                said,
                self.session.tools,
                replace=forced or url in self.ours,
                earlier=url in self.earlier,
            )
            self.ours.add(url)
            self.earlier.discard(url)
            self.last_file = target
            count = "1 message" if len(said) == 1 else f"{len(said)} messages"
            quoted = shlex.quote(self.checkpoint), shlex.quote(target)
            again = "uv run apps/chat.py --checkpoint {} --conversation {}".format(*quoted)
            note = f"saved {count} to {target}; go on with it: {again}"
            print(note, file=sys.stderr, flush=True)


def _url(location: str) -> str:
    """The URL a file's name stands for (``chat.json`` and ``./chat.json`` are one file)."""
    from meltemi.datastore.storage import Location

    return Location.parse(location).url


def _typed(continuing: Callable[[], bool]):
    """Lines typed at a terminal, each after a prompt (``...`` while ``continuing`` a message of several
    lines), with line editing; until end of input (Ctrl-D). Ctrl-C at the prompt drops the line typed and
    says how to end, as a shell does."""
    import readline  # noqa: F401  (input() then edits the line and keeps the history)

    while True:
        try:
            yield input("... " if continuing() else "> ")
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            print()
            print("(Ctrl-D or /bye ends the chat)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
