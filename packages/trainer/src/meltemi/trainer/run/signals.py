"""SIGTERM (how preemptible machines announce their end) and Ctrl-C ask the run to stop at the next step
boundary, after a checkpoint, instead of killing it mid-step.

A signal sent to a whole process group without a terminal (``timeout -s INT``, a CI runner, a supervisor)
reaches the trainer once per process on its way (``uv run`` forwards the copy it got, too): every copy
within ``repeat_window_s`` of the first is the same request. A second Ctrl-C after that interrupts at once.

>>> import os, signal
>>> with StopSignals() as stop:
...     os.kill(os.getpid(), signal.SIGTERM)
...     os.kill(os.getpid(), signal.SIGINT)  # within the window: the same request
...     stop.received
'SIGTERM'
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable


class StopSignals:
    """A context that records the first SIGTERM or SIGINT in ``received`` (handlers restored on exit).

    Outside the main thread (where Python cannot install handlers) it records nothing and changes nothing.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, repeat_window_s: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.received: str | None = None
        self.repeat_window_s, self._clock = repeat_window_s, clock
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        now = self._clock()
        if self.received is None:
            self.received, self._first_at = signal.Signals(signum).name, now
        elif signum == signal.SIGINT and now - self._first_at > self.repeat_window_s:
            raise KeyboardInterrupt

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def exit_status(stopped_by: str | None) -> int:
    """The process's exit status for a run stopped by ``stopped_by`` (a signal's name), by the shell's
    convention of 128 plus the signal's number; 0 for a run that was not stopped.

    >>> exit_status("SIGINT"), exit_status("SIGTERM"), exit_status(None)
    (130, 143, 0)
    """
    return 0 if stopped_by is None else 128 + signal.Signals[stopped_by].value
