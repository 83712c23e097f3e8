"""The commands of a chat's prompt loop: a message whose first word is ``/`` and a command's name is that
command, not a message to the model (``/help`` lists them, as Ollama's prompt does). ``//`` at the start
of a message sends it with one ``/``. A word after ``/`` that names no command is refused, so a mistyped
``/bye`` never reaches the model; a message that begins with a path (``/usr/lib ...``) is a message.

>>> read_command("/save chat.json")
Command(name='save', argument='chat.json')
>>> read_command("//save is a command"), read_command("/usr/lib is a folder")
('/save is a command', '/usr/lib is a folder')
>>> read_command("/by")
Traceback (most recent call last):
...
meltemi.trainer.generate.chat_commands.ChatCommandError: /by: no such command; /help lists them (a message...
"""

from __future__ import annotations

import dataclasses
import re

from meltemi.trainer.generate.sampling import GenerationError


class ChatCommandError(GenerationError):
    """A prompt-loop command that names no command, or is given the wrong argument."""


@dataclasses.dataclass(frozen=True)
class CommandSpec:
    """A command: its name, what it does, the name of the argument it may be given (``""``: it takes
    none; what it does without one, its summary says) and the other names it answers to."""

    name: str
    summary: str
    argument: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def usage(self) -> str:
        """How it is typed, e.g. ``/save [FILE]``."""
        return f"/{self.name} [{self.argument}]" if self.argument else f"/{self.name}"


COMMANDS = (
    CommandSpec(
        "tool",
        "a called tool's result (a tool message), which the model answers",
        argument="RESULT",
    ),
    CommandSpec(
        "save",
        "save the conversation as JSON for --conversation (alone: to the file read or saved last)",
        argument="FILE",
    ),
    CommandSpec(
        "save!",
        "the same, replacing what FILE holds (a conversation before /clear, or any other file)",
        argument="FILE",
    ),
    CommandSpec("clear", "start a new conversation (the system message and tools stay)"),
    CommandSpec("help", "list these commands", aliases=("?",)),
    CommandSpec("bye", "end the chat, as Ctrl-D does", aliases=("exit", "quit")),
)

_NAMED = {name: spec for spec in COMMANDS for name in (spec.name, *spec.aliases)}
_COMMAND_WORD = re.compile(r"/([A-Za-z]+!?|\?)(?=\s|$)")  # a slash, a word (maybe with !), a space or end


@dataclasses.dataclass(frozen=True)
class Command:
    """A command read from a message: its name (never an alias) and its argument (``""`` when none)."""

    name: str
    argument: str = ""


def read_command(message: str) -> Command | str:
    """``message`` as a ``Command`` when its first word is one, else the message to send (``//`` at its
    start sent as ``/``); a ``ChatCommandError`` for a word after ``/`` that names no command, or an argument
    given to a command that takes none.

    >>> read_command("/tool 5"), read_command("/?"), read_command("/tools?")
    (Command(name='tool', argument='5'), Command(name='help', argument=''), '/tools?')
    >>> read_command("/save! chat.json")
    Command(name='save!', argument='chat.json')
    """
    if message.startswith("//"):
        return message[1:]
    word = _COMMAND_WORD.match(message)
    if word is None:
        return message
    spec = _NAMED.get(word.group(1).lower())
    if spec is None:
        raise ChatCommandError(
            f"/{word.group(1)}: no such command; /help lists them (a message that begins with / is "
            "written //)"
        )
    argument = message[word.end() :].lstrip()
    if spec.name != "tool":  # a tool's result is sent as written; a file name has no spaces around it
        argument = argument.strip()
    if not spec.argument and argument:
        raise ChatCommandError(f"/{spec.name} takes nothing after it (given {argument!r})")
    return Command(spec.name, argument)


def command_help() -> str:
    """What ``/help`` shows: each command with what it does, then how to send a message beginning with ``/``.

    >>> print(command_help().splitlines()[3])
      /clear          start a new conversation (the system message and tools stay)
    """
    width = max(len(spec.usage) for spec in COMMANDS)
    lines = []
    for spec in COMMANDS:
        also = f" (also {', '.join('/' + alias for alias in spec.aliases)})" if spec.aliases else ""
        lines.append(f"  {spec.usage:<{width}}  {spec.summary}{also}")
    lines.append(f"  {'//TEXT':<{width}}  the message /TEXT (one that begins with /)")
    return "\n".join(lines)
