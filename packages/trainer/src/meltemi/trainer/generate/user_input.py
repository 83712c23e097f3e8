'''A chat's user messages in lines of input (typed or piped): one message per non-blank line, or several
lines as one message between triple quotes, as Ollama's prompt reads them, so that code can be pasted.

>>> list(UserMessages(['Hi', '', '"""Describe this:', 'def f():', '    pass"""', 'Thanks']))
['Hi', 'Describe this:\\ndef f():\\n    pass', 'Thanks']
'''

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

FENCE = '"""'  # opens a message of several lines at the start of a line, closes it at the end of one


@dataclass
class UserMessages:
    '''The messages in ``lines``: each non-blank line is one; a line starting with ``"""`` opens a
    message that goes on, line by line, to a line ending with ``"""`` (both fences left out, so
    ``"""one line"""`` is ``one line``). A message still open when the input ends is kept. While one
    is open, ``open`` is True (a terminal's prompt says so).

    >>> messages = UserMessages(['"""', 'first', '', 'third', '"""'])
    >>> list(messages), messages.open
    (['first\\n\\nthird'], False)
    '''

    lines: Iterable[str]
    open: bool = field(default=False, init=False)

    def __iter__(self) -> Iterator[str]:
        gathered: list[str] = []  # the open message's lines
        for line in self.lines:
            text = line.rstrip("\r\n")
            if not self.open and not text.lstrip().startswith(FENCE):
                if text.strip():
                    yield text
                continue
            if not self.open:
                self.open, gathered, text = True, [], text.lstrip()[len(FENCE) :]
                if not text.strip():
                    continue  # the fence alone: the message starts on the next line
            closed = text.rstrip().endswith(FENCE)
            piece = text.rstrip()[: -len(FENCE)] if closed else text
            if not closed or piece.strip():  # the closing fence alone adds no line
                gathered.append(piece)
            if closed:
                self.open = False
                yield from _message(gathered)
        if self.open:
            self.open = False
            yield from _message(gathered)


def _message(lines: list[str]) -> Iterator[str]:
    """The lines of a message as one, when it is not blank."""
    message = "\n".join(lines)
    if message.strip():
        yield message
