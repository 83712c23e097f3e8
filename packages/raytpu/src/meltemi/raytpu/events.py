"""What happened to a job, for people and for programs.

``EventLog`` appends one JSON object per line (``slice_acquired``, ``slice_lost``, ``host_failed``,
``retry``, ``scaled``, ``finished``, ``gave_up``); ``StatusLine`` keeps one line on a terminal up to date.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")  # gs://, s3://, file:/: not a local path


class EventLog:
    """Structured events of one job, appended to a JSON-lines file (and kept in memory as ``events``), or
    handed line by line to ``sink`` (a run directory in a bucket, say, which a file path cannot name).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "events.jsonl"
    >>> log = EventLog(path, job="demo")
    >>> log.emit("retry", attempt=1, cause="preemption")["event"]
    'retry'
    >>> json.loads(path.read_text())["cause"]
    'preemption'
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        job: str = "",
        sink: Callable[[str], None] | None = None,
    ) -> None:
        if path is not None and sink is not None:
            raise ValueError("an event log goes to a file or to a sink, not both")
        if path is not None and _URL.match(os.fspath(path)):
            raise ValueError(
                f"event log {os.fspath(path)!r}: a URL; a file path names a local file, and sink= takes each "
                "line for anywhere else (a bucket through your storage library)"
            )
        self.path = Path(path) if path is not None else None
        self.sink = sink
        self.job = job
        self.events: list[dict[str, Any]] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": round(time.time(), 3), "job": self.job, "event": event, **fields}
        self.events.append(record)
        line = json.dumps(record, sort_keys=True, default=str)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line + "\n")
        if self.sink is not None:
            self.sink(line)
        return record


class StatusLine:
    """One line on a terminal, rewritten in place; silent when the stream is not a terminal."""

    def __init__(self, stream: TextIO | None = None, *, force: bool = False) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = 0

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        padding = " " * max(0, self._width - len(text))
        self.stream.write("\r" + text + padding)
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0


def status_text(
    *,
    job: str,
    slice_type: str,
    attempt: int,
    num_slices: int,
    running: int,
    done: int,
    preemptions: tuple[int, int],
    failures: tuple[int, int],
) -> str:
    """The one-line summary of a job.

    >>> status_text(job="j", slice_type="v4-16", attempt=1, num_slices=2, running=3, done=1,
    ...             preemptions=(1, 5), failures=(0, 2))
    'j · v4-16 × 2 · attempt 1 · hosts 3 running, 1 done · preemptions 1/5 · failures 0/2'
    """
    return (
        f"{job} · {slice_type} × {num_slices} · attempt {attempt} · hosts {running} running, {done} done"
        f" · preemptions {preemptions[0]}/{preemptions[1]} · failures {failures[0]}/{failures[1]}"
    )
