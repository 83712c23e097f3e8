"""Keep gloo's connection announcements out of a multi-process CPU job's output.

On CPU, JAX's processes exchange data through gloo, whose C++ code writes a line to standard output for
every group of devices it connects ("[Gloo] Rank 3 is connected to 7 peer ranks. Expected number of
connected peer ranks is : 7"), unconditionally: a run across two fake slices printed a dozen of them,
interleaved mid-line between processes and coloured by Ray's log forwarding. ``drop_gloo_lines`` puts a
pipe in front of the process's standard output (file descriptor 1, where the C++ writes) and a thread that
passes every other line on, in order; at exit what is left is passed on before the process ends.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

GLOO_MARKS = (b"[Gloo] Rank ", b"Expected number of connected peer ranks")
_installed = False


def is_gloo_line(line: bytes) -> bool:
    """Whether ``line`` is (a piece of) gloo's announcement that a rank connected to its peers.

    >>> is_gloo_line(b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks")
    True
    >>> is_gloo_line(b"5 is connected to 7 peer ranks. Expected number of connected peer ranks is : 7")
    True
    >>> is_gloo_line(b"step 4/4  loss 7.9514")
    False
    """
    return any(mark in line for mark in GLOO_MARKS)


def drop_gloo_lines() -> None:
    """From now on, drop gloo's connection lines from this process's standard output (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    sys.stdout.flush()
    original = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)

    def pump() -> None:
        pending = b""
        while chunk := os.read(read_end, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            _write(original, b"".join(line + b"\n" for line in lines if not is_gloo_line(line)))
        if pending and not is_gloo_line(pending):
            _write(original, pending)
        os.close(read_end)

    thread = threading.Thread(target=pump, name="meltemi-stdout", daemon=True)
    thread.start()

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(original, 1)  # closes the pipe's write end: the thread reads what is left, then the end
        thread.join(timeout=5)

    atexit.register(restore)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
