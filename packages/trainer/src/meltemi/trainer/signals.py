"""SIGTERM (how preemptible machines announce their end) and Ctrl-C ask the run to stop at the next step
boundary, after a checkpoint, instead of killing it mid-step. A second Ctrl-C interrupts at once.

>>> import os, signal
>>> with StopSignals() as stop:
...     os.kill(os.getpid(), signal.SIGTERM)
...     stop.received
'SIGTERM'
"""

from __future__ import annotations

import signal
import threading


class StopSignals:
    """A context that records the first SIGTERM or SIGINT in ``received`` (handlers restored on exit).

    Outside the main thread (where Python cannot install handlers) it records nothing and changes nothing.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.received: str | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
