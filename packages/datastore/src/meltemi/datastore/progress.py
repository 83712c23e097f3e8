"""A one-line terminal progress bar (documents, tokens, tokens/s), drawn only when stderr is a terminal; or,
for a caller that draws its own display (several builds side by side), each moment of it as a `Progress`
given to that caller's function.
"""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Progress:
    """A build's progress at one moment: its stage (`reading inputs`, `tokenizing`, `assembling`), the units
    done of `total`, the documents and tokens so far, the seconds since the stage began, and whether it has
    ended.

    >>> Progress("tokenizing", 3, 4, 120, 56_000, 2.0).counts()
    '120 docs  56k tokens  28k tokens/s'
    """

    stage: str
    done: int
    total: int
    documents: int
    tokens: int
    seconds: float
    ended: bool = False

    def counts(self) -> str:
        """The documents, tokens and tokens per second, in words, as the bar says them."""
        rate = self.tokens / max(self.seconds, 1e-9)
        return f"{human(self.documents)} docs  {human(self.tokens)} tokens  {human(rate)} tokens/s"


ProgressReport = Callable[[Progress], object]
"""A function given each moment of a build's progress (`build_store(progress=...)`), from the building
thread, at most every 0.1 s and once when each stage ends."""

Shown = bool | ProgressReport
"""How a build shows its progress: a bar on stderr when it is a terminal (True), none (False), or each
moment given to a function."""


def human(count: float) -> str:
    """A count with a k/M/G/T suffix: `human(1_234_567) == '1.23M'`."""
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(count) >= scale:
            return f"{count / scale:.3g}{suffix}"
    return f"{count:.0f}"


class ProgressBar:
    """Progress over `total` units of work; silent unless `stream` is a TTY, or given to `enabled` when it is
    a function (`ProgressReport`). Use as a context manager.

    It also counts the documents that were not UTF-8, and says what became of them (`invalid_utf8`).
    """

    WIDTH = 24

    def __init__(
        self,
        total: int,
        label: str,
        stream: TextIO | None = None,
        min_interval: float = 0.1,
        enabled: Shown = True,
        invalid_utf8: str = "error",
    ):
        self.total, self.label, self.policy = total, label, invalid_utf8
        self.stream = stream if stream is not None else sys.stderr
        self.report = enabled if callable(enabled) else None
        terminal = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = self.report is not None or (bool(enabled) and terminal)
        self.done = self.documents = self.tokens = self.invalid_utf8 = 0
        self.nodes = 0  # machines running the work, shown when more than one
        self.start = time.perf_counter()
        self.min_interval, self._last_draw = min_interval, 0.0

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc) -> None:
        if self.report is not None:
            self.report(self.now(ended=True))
        elif self.enabled:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()

    def now(self, ended: bool = False) -> Progress:
        """Where the work stands."""
        seconds = time.perf_counter() - self.start
        return Progress(self.label, self.done, self.total, self.documents, self.tokens, seconds, ended)

    def advance(self, units: int = 1, documents: int = 0, tokens: int = 0, invalid_utf8: int = 0) -> None:
        self.done += units
        self.documents += documents
        self.tokens += tokens
        self.invalid_utf8 += invalid_utf8
        if self.enabled:
            self._draw()

    def _draw(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        if self.report is not None:
            self.report(self.now())
            return
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"\r{self.label} [{bar}] {self.done}/{self.total}  {self.now().counts()}"
        if self.nodes > 1:
            line += f"  {self.nodes} nodes"
        if self.invalid_utf8:
            done = {"skip": "skipped", "replace": "replaced"}.get(self.policy, "found")
            line += f"  {human(self.invalid_utf8)} with invalid UTF-8 {done}"
        self.stream.write(line)
        self.stream.flush()
