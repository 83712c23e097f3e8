"""The progress display: training's rich bar (step, loss, tokens/s, MFU or FLOP/s, ETA) on a terminal, and a
plain line per log interval elsewhere (CI logs, files); and a bar over any other long piece of work
(``WorkProgress``: an evaluation's requests), drawn on a terminal only. Everything goes to stderr."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from meltemi.datastore.progress import human


class TrainingProgress:
    """Use as a context manager; ``update`` after each logged step, ``note`` for one-off messages."""

    def __init__(self, total_steps: int, start_step: int = 0, enabled: bool = True):
        self.console = Console(stderr=True, file=sys.stderr, soft_wrap=True)
        self.enabled = enabled
        self.interactive = enabled and self.console.is_terminal
        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.interactive,
        )
        self._task = self._progress.add_task("train", total=total_steps, completed=start_step, status="")

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def update_total(self, total_steps: int, completed: int) -> None:
        """Where the bar starts (a resumed run starts part of the way)."""
        self._progress.update(self._task, total=total_steps, completed=completed)

    def update(
        self, step: int, loss: float, tokens_per_second: float, mfu: float | None, flops: float
    ) -> None:
        speed = f"MFU {mfu:.1%}" if mfu is not None else f"{human(flops)}FLOP/s"
        status = f"loss {loss:.4f}  {human(tokens_per_second)} tok/s  {speed}"
        self._progress.update(self._task, completed=step, status=status)
        if self.enabled and not self.interactive:
            total = self._progress.tasks[0].total
            self.console.print(f"step {step}/{total}  {status}", highlight=False)

    def note(self, message: str) -> None:
        if self.enabled:
            self.console.print(message, highlight=False)


class WorkProgress:
    """A bar over ``total`` items of one piece of work (an evaluation's requests, say), drawn on stderr as
    training's is, when it is a terminal and ``enabled``; nothing otherwise, so logs and pipes stay as they
    were. Use as a context manager; ``advance`` as items finish.

    >>> with WorkProgress("scoring", 3) as bar:
    ...     bar.advance(3)
    >>> bar.done
    3
    """

    def __init__(self, label: str, total: int, enabled: bool = True, console: Console | None = None):
        self.console = console or Console(stderr=True, file=sys.stderr, soft_wrap=True)
        self.shown = enabled and self.console.is_terminal
        self.done = 0
        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            disable=not self.shown,
        )
        self._task = self._progress.add_task(label, total=total)

    def __enter__(self) -> WorkProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def advance(self, items: int = 1) -> None:
        self.done += items
        self._progress.update(self._task, completed=self.done)
