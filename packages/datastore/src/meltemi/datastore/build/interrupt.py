"""Ctrl-C during a build: noted when it comes, acted on between units, so the parts finished are kept.

Python raises ``KeyboardInterrupt`` at the next bytecode it runs, and during a build that is often inside a
garbage-collection callback (JAX's, once it is imported: a tokenizer's long native call returns, the
allocations after it start a collection), where the interpreter prints the exception as "ignored" with
its traceback and the build goes on. So while a build runs in the main thread with Python's own handler,
``Interruption`` takes SIGINT instead: the first (and its copies within 2 s: ``uv run`` forwards one
beside the terminal's) asks the build to stop at the next unit's end and says so; the build's loops call
``check`` between units, which raises ``BuildInterrupted`` there, naming what was kept and how to resume.
A second Ctrl-C after that raises ``KeyboardInterrupt`` at once. Elsewhere (a thread, or a caller with a
handler of its own) it changes nothing.

>>> with Interruption("corpora/web", print) as interruption:
...     interruption.check(3, 8)  # no Ctrl-C: nothing happens
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

REPEAT_WINDOW_S = 2.0  # copies of one Ctrl-C (the terminal's, uv's) arrive within this


class BuildInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a build between its units; the message says what it kept and how to resume.

    >>> str(BuildInterrupted("stopped"))
    'stopped'
    """


class Interruption:
    """Notes SIGINT while a build runs (see the module); ``check`` acts on it. Use as a context manager."""

    def __init__(self, out: str, say: Callable[[str], object]):
        self.out, self.say = out, say
        self.requested_at: float | None = None
        self._previous = None

    def __enter__(self) -> Interruption:
        ours = threading.current_thread() is threading.main_thread()
        if ours and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: object) -> None:
        now = time.monotonic()
        if self.requested_at is None:
            self.requested_at = now
            self.say("stopping the build once the units in progress are written (Ctrl-C again stops at once)")
        elif now - self.requested_at > REPEAT_WINDOW_S:
            raise KeyboardInterrupt

    def check(self, done: int, total: int) -> None:
        """Raise ``BuildInterrupted`` when Ctrl-C asked the build to stop, saying that ``done`` of its
        ``total`` units are kept."""
        if self.requested_at is not None:
            raise BuildInterrupted(stopped_line(self.out, done, total))

    def resuming(self, kept: int, total: int) -> None:
        """Say that the build goes on from ``kept`` of its ``total`` units, tokenized by an earlier one."""
        if 0 < kept < total:
            self.say(f"resuming the build of {self.out}: {kept} of its {total} units were tokenized before")


def stopped_line(out: str, done: int, total: int) -> str:
    """What a build stopped by Ctrl-C says.

    >>> print(stopped_line("corpora/web", 3, 8))
    interrupted: corpora/web keeps 3 of its 8 units tokenized (under .build/); the same command resumes ...
    """
    return (
        f"interrupted: {out} keeps {done} of its {total} units tokenized (under .build/); the same command "
        "resumes the build from there"
    )
