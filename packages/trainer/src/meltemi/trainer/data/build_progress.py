"""Stores built side by side, shown as one display: a bar for each store (its stage, units done, documents,
tokens, tokens/s), drawn on stderr when it is a terminal, as training's bar is; nothing elsewhere, where
each store's outcome line says what it built. One build alone draws the datastore's own bar.

>>> from meltemi.datastore.progress import Progress
>>> with SideBySideBuilds(["data.sources.web", "data.sources.code"]) as shown:
...     shown.reporter("data.sources.web")(Progress("tokenizing", 3, 4, 120, 56_000, 2.0))
>>> shown.counts["data.sources.web"]
'120 docs  56k tokens  28k tokens/s'
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.progress import BarColumn, TextColumn
from rich.progress import Progress as Bars

from meltemi.datastore.progress import Progress


class SideBySideBuilds:
    """One bar per store being built (named by its config field), updated from each build's thread through
    ``reporter``; a context manager that draws while it is open."""

    def __init__(self, fields: Sequence[str], console: Console | None = None):
        self.console = console or Console(stderr=True, file=sys.stderr, soft_wrap=True)
        self.counts: dict[str, str] = {}  # each store's documents and tokens, as its bar shows them
        self._bars = Bars(
            TextColumn("{task.description}"),
            TextColumn("{task.fields[stage]}"),
            BarColumn(),
            TextColumn("{task.completed:.0f}/{task.total:.0f}  {task.fields[counts]}"),
            console=self.console,
            disable=not self.console.is_terminal,
        )
        self._tasks = {
            field: self._bars.add_task(field, total=1, stage="waiting", counts="") for field in fields
        }

    def __enter__(self) -> SideBySideBuilds:
        self._bars.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bars.stop()

    def reporter(self, field: str) -> Callable[[Progress], None]:
        """What the build of ``field``'s store is given as its ``progress``."""

        def report(progress: Progress) -> None:
            if progress.documents or progress.tokens or field not in self.counts:
                self.counts[field] = progress.counts()  # assembling counts none: the tokenizing's stay
            stage = f"{progress.stage}, done" if progress.ended else progress.stage
            self._bars.update(
                self._tasks[field], total=max(progress.total, 1), completed=progress.done, stage=stage,
                counts=self.counts[field],
            )  # fmt: skip

        return report
