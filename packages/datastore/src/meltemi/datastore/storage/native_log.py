"""Keep the log lines TensorStore's C++ clients write to the process's stderr out of a probe's answer.

TensorStore's clients log with absl (`E1127 00:54:07.118258  19138 file.cc:188] …`) straight to file
descriptor 2, out of Python's reach. The first request to GCS without application-default credentials
logs one such line, once per process, before the request goes out anonymously. A probe
(`check_writable`, `check_readable`) is a process's first request to a location, and it says whatever
went wrong in one line of its own; so during a probe the descriptor is held aside, and afterwards
everything that is not an absl log line is written out again, in order. `TENSORSTORE_VERBOSE_LOGGING`
(asking for TensorStore's logs) turns the holding off.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

ABSL_LINE = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]*\] ")
"""An absl log line: severity, MMDD, time, thread id, `file:line]`."""


@contextlib.contextmanager
def native_log_held(fd: int = 2) -> Iterator[list[bytes]]:
    """Within the block, hold what is written to descriptor `fd`; then write back all but absl's log lines,
    which the yielded list receives.

    >>> import os
    >>> with native_log_held() as dropped:
    ...     _ = os.write(2, b"E1127 00:54:07.118258   19138 common-io:5] static: Failed to open file\\n")
    >>> [line[:5] for line in dropped]
    [b'E1127']
    """
    dropped: list[bytes] = []
    if os.environ.get("TENSORSTORE_VERBOSE_LOGGING"):
        yield dropped
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield dropped
        finally:
            with contextlib.suppress(ValueError, OSError):
                sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            held.seek(0)
            kept = bytearray()
            for line in held.read().splitlines(keepends=True):
                if ABSL_LINE.match(line):
                    dropped.append(line)
                else:
                    kept += line
            view = memoryview(kept)
            while view:
                view = view[os.write(fd, view) :]
