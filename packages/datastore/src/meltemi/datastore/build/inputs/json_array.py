"""The records of one JSON array read as a stream, one at a time, so that a file of a million conversations
(ShareGPT's and Alpaca's data sets are single arrays of hundreds of megabytes) costs the memory of one record
and a chunk of text, not of the whole file parsed at once. A malformed array is an `InputError` with the
message, line and column `json.loads` gives; the records before the mistake have been yielded by then.

>>> list(array_items(['[{"text": "one"}, {"te', 'xt": "two"}]'], "a.json"))
[{'text': 'one'}, {'text': 'two'}]
>>> list(array_items(['[{"text": "one"} {"text": "two"}]'], "a.json"))
Traceback (most recent call last):
...
meltemi.datastore.errors.InputError: a.json: not valid JSON (Expecting ',' delimiter at line 1, column 18)
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from meltemi.datastore.errors import InputError

CHUNK = 1 << 20  # characters of text decoded at a time
_SPACE = " \t\n\r"  # JSON's white space
_NUMBER = "0123456789.eE+-"  # what a number may go on with


def text_chunks(f: BinaryIO, size: int = CHUNK) -> Iterator[str]:
    """The UTF-8 text of the binary stream `f`, decoded `size` bytes at a time (a character cut by a
    chunk's end is kept for the next); a `UnicodeDecodeError` at the first byte that is not UTF-8.

    >>> import io
    >>> list(text_chunks(io.BytesIO("é!".encode()), size=1))
    ['é', '!']
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    while block := f.read(size):
        if text := decoder.decode(block):
            yield text
    decoder.decode(b"", final=True)  # a character cut short at the end is not UTF-8


def array_items(chunks: Iterable[str], name: str) -> Iterator[Any]:
    """Each item of the JSON array whose text comes in `chunks`, in order; an `InputError` naming `name`
    for text that is not one JSON array (with what `json.loads` would say of it, and where)."""
    stream = _Stream(iter(chunks), name)
    if stream.next_character() != "[":
        raise InputError(f"{name}: not a JSON array of records, nor JSON Lines")
    stream.position += 1
    if stream.next_character() == "]":
        stream.position += 1
        stream.end()
        return
    while True:
        yield stream.value()
        following = stream.next_character()
        if following == ",":
            stream.position += 1
        elif following == "]":
            stream.position += 1
            stream.end()
            return
        else:
            raise stream.error("Expecting ',' delimiter")


class _Stream:
    """Text that arrives in chunks, read from `position`: what was read is dropped as more arrives, its
    lines counted for messages."""

    def __init__(self, chunks: Iterator[str], name: str):
        self.chunks, self.name = chunks, name
        self.text, self.position = "", 0
        self.lines_before = 0  # lines dropped before `text`
        self.column_before = 0  # characters of the line `text` begins in, dropped before it
        self.decoder = json.JSONDecoder()

    def more(self) -> bool:
        """Drop what was read and append the next chunk; False (nothing changed) when there is none."""
        for chunk in self.chunks:
            if not chunk:
                continue
            read = self.text[: self.position]
            newlines = read.count("\n")
            if newlines:
                self.lines_before += newlines
                self.column_before = len(read) - read.rfind("\n") - 1
            else:
                self.column_before += len(read)
            self.text, self.position = self.text[self.position :] + chunk, 0
            return True
        return False

    def next_character(self) -> str | None:
        """The next character that is not white space (read up to it), None at the end of the text."""
        while True:
            while self.position < len(self.text) and self.text[self.position] in _SPACE:
                self.position += 1
            if self.position < len(self.text):
                return self.text[self.position]
            if not self.more():
                return None

    def value(self) -> Any:
        """The JSON value at `position` (read past it): more text is read while the value may go on past
        the end of what has arrived."""
        self.next_character()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.text, self.position)
            except json.JSONDecodeError as e:
                if self.more():
                    continue
                raise self.error(e.msg, e.pos) from None
            following = end
            while following < len(self.text) and self.text[following] in _NUMBER:
                following += 1
            if following == len(self.text) and self.more():
                continue  # a number cut by the chunk's end (`-0.` of `-0.5`) goes on in the next one
            self.position = end
            return value

    def end(self) -> None:
        """Nothing but white space may follow the array."""
        if self.next_character() is not None:
            raise self.error("Extra data")

    def error(self, message: str, at: int | None = None) -> InputError:
        """An `InputError` saying `message` of the character at `at` (else `position`), as `json.loads` says
        it: its line and column counted from the start of the whole text."""
        at = self.position if at is None else at
        line = self.lines_before + self.text.count("\n", 0, at) + 1
        last_newline = self.text.rfind("\n", 0, at)
        column = at - last_newline if last_newline >= 0 else self.column_before + at + 1
        return InputError(f"{self.name}: not valid JSON ({message} at line {line}, column {column})")
