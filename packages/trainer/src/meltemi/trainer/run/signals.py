"""SIGTERM (how preemptible machines announce their end) and Ctrl-C ask the run to stop at the next step
boundary, after a checkpoint, instead of killing it mid-step.

A signal sent to a whole process group without a terminal (``timeout -s INT``, a CI runner, a supervisor)
reaches the trainer once per process on its way (``uv run`` forwards the copy it got, too): every copy
within ``repeat_window_s`` of the first is the same request. A second Ctrl-C after that interrupts at once.
Where a thread answers signals as they arrive (``say``), that thread alone tells a repeat from a second
Ctrl-C, by when each arrived: Python's handler runs only once the main thread is back in Python (after
the step in progress) and runs once for several copies of one signal, so its own clock could call
"the same request" what the answer had already called "abandoned", or the other way round.

>>> import os, signal
>>> with StopSignals() as stop:
...     os.kill(os.getpid(), signal.SIGTERM)
...     os.kill(os.getpid(), signal.SIGINT)  # within the window: the same request
...     stop.received
'SIGTERM'
"""

from __future__ import annotations

import _thread
import os
import signal
import socket
import threading
import time
from collections.abc import Callable


class StopSignals:
    """A context that records the first SIGTERM or SIGINT in ``received`` (handlers restored on exit).

    With ``say`` (how the run prints a line) it also answers each signal at once, while the main thread is
    still busy in a step that the Python handler cannot interrupt: a thread woken by the signal itself
    (``signal.set_wakeup_fd``) says ``stopping after step N: saving a checkpoint (press Ctrl-C again to
    abandon it)``, and for a second Ctrl-C what ``abandoned`` describes (what was and was not saved, and
    how to resume); with ``grace_s`` the process then ends within that many seconds even if the step does
    not return. The run's loop says where it starts (``begin``) and asks ``check(step)`` at each step
    boundary, which keeps ``boundary`` (the step a stop asked now saves after) current.

    Outside the main thread (where Python cannot install handlers) it records nothing and changes nothing.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(
        self,
        repeat_window_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        say: Callable[[str], None] | None = None,
        abandoned: Callable[[], str] = lambda: "abandoned: nothing more was saved",
        grace_s: float | None = None,
    ):
        self.received: str | None = None
        self.repeat_window_s, self._clock = repeat_window_s, clock
        self._first_at = 0.0
        self._previous: dict[int, object] = {}
        self.say, self.abandoned, self.grace_s = say, abandoned, grace_s
        self.boundary = 0
        self._answered: tuple[str, float] | None = None  # the answering thread's own record of the first
        self._abandon = False  # the answering thread's verdict, which the handler acts on
        self._lock = threading.Lock()  # the answer's step and the loop's check agree on where to stop
        self._wakeup: tuple[socket.socket, socket.socket, int, threading.Thread] | None = None

    def _handle(self, signum, frame) -> None:
        if self._wakeup is not None:  # the answering thread decides, by arrival (see the module's docstring)
            if self.received is None:
                self.received = signal.Signals(signum).name
            if self._abandon:
                raise KeyboardInterrupt
            return
        now = self._clock()
        if self.received is None:
            self.received, self._first_at = signal.Signals(signum).name, now
        elif signum == signal.SIGINT and now - self._first_at > self.repeat_window_s:
            raise KeyboardInterrupt

    def _answer(self, signum: int) -> None:
        """What the answering thread says of a signal the moment it arrives (the same rule as ``_handle``)."""
        if signum not in self.SIGNALS or self.say is None or self._abandon:
            return  # after abandoning, a further Ctrl-C (or the interrupt below) has nothing left to say
        now, name = self._clock(), signal.Signals(signum).name
        if self._answered is None:
            with self._lock:
                self._answered, boundary = (name, now), self.boundary
            how = " (press Ctrl-C again to abandon it)" if signum == signal.SIGINT else f" ({name})"
            self.say(f"stopping after step {boundary}: saving a checkpoint{how}")
        elif signum == signal.SIGINT and now - self._answered[1] > self.repeat_window_s:
            self._abandon = True
            self.say(self.abandoned())
            _thread.interrupt_main(signal.SIGINT)  # the handler raises as soon as the main thread can
            if self.grace_s is not None:  # a step that does not return: end the process anyway
                ending = threading.Timer(self.grace_s, os._exit, args=(130,))
                ending.daemon = True
                ending.start()

    def begin(self, step: int, *, abandoned: Callable[[], str]) -> None:
        """The run's loop starts at the boundary ``step``; from then on a second Ctrl-C is answered with
        what ``abandoned`` says (the loop knows what it has saved)."""
        with self._lock:
            self.boundary, self.abandoned = step, abandoned

    def check(self, step: int) -> str | None:
        """The signal asking the run to stop at the boundary ``step`` (None: go on); what the answer said
        and where the run stops agree, since both read ``boundary`` under one lock."""
        with self._lock:
            asked = self.received or (None if self._answered is None else self._answered[0])
            self.boundary = step if asked else step + 1
            return asked

    def _listen(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:  # closed on exit
                return
            if not data:
                return
            for signum in data:
                self._answer(signum)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            if self.say is not None:
                reader, writer = socket.socketpair()
                writer.setblocking(False)
                previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
                listener = threading.Thread(
                    target=self._listen, args=(reader,), name="meltemi-signals", daemon=True
                )
                listener.start()
                self._wakeup = (reader, writer, previous, listener)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._wakeup is not None:
            reader, writer, previous, listener = self._wakeup
            signal.set_wakeup_fd(previous)
            # The listener answers the signals already written before it sees the end: a second Ctrl-C
            # whose KeyboardInterrupt brought us here is still said (a busy machine ran it after us).
            writer.close()
            listener.join(timeout=1.0)
            reader.close()
            self._wakeup = None


def exit_status(stopped_by: str | None) -> int:
    """The process's exit status for a run stopped by ``stopped_by`` (a signal's name), by the shell's
    convention of 128 plus the signal's number; 0 for a run that was not stopped.

    >>> exit_status("SIGINT"), exit_status("SIGTERM"), exit_status(None)
    (130, 143, 0)
    """
    return 0 if stopped_by is None else 128 + signal.Signals[stopped_by].value
