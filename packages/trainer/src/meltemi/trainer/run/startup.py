"""Where a run's time goes before its first step, in one line, so a slow start or restart says why.

The clock starts when the process did (read from ``/proc`` where there is one, else when this module was
first imported), so the first lap counts Python's own start and the imports; each later lap counts from the
one before, so the laps add up to the whole wait.

>>> clock = StartupClock(started=0.0, now=iter([2.5, 2.75, 4.0]).__next__)
>>> clock.lap("imports"); clock.lap("config"); clock.lap("train step compiled")
>>> clock.line()
'ready in 4.0 s: imports 2.5 s, config 0.2 s, train step compiled 1.2 s'
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable


def _seconds_since_process_start() -> float:
    """How long ago this process started, from Linux's ``/proc`` (0 where it cannot be read)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            fields = stat.read().rpartition(")")[2].split()  # the fields after the command's name
            since_boot = float(uptime.read().split()[0])
        return max(since_boot - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return 0.0


PROCESS_STARTED = time.perf_counter() - _seconds_since_process_start()


@dataclasses.dataclass
class StartupClock:
    """Named laps from ``started`` (default: when the process started) to the first step."""

    started: float = PROCESS_STARTED
    now: Callable[[], float] = time.perf_counter
    laps: list[tuple[str, float]] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self._last = self.started

    def lap(self, name: str) -> None:
        """The time since the previous lap (or the start) was spent on ``name``."""
        at = self.now()
        self.laps.append((name, at - self._last))
        self._last = at

    @property
    def total(self) -> float:
        return self._last - self.started

    def line(self, *notes: str) -> str:
        """``ready in T s: lap t s, ...`` followed by any notes (say, what the compilation cache did)."""
        laps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.laps)
        return "; ".join([f"ready in {self.total:.1f} s: {laps}", *notes])
