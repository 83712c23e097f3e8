"""Choosing a port for a server another process will open later, without racing outgoing connections.

A port found by binding port 0 comes from the kernel's ephemeral range: the same range every outgoing
connection on the host takes its local port from. Between the probe and the server's own bind (a worker
process starting, seconds later), any connection to an S3 server, a Ray raylet or a metadata service may be
given that port, and the server then fails to start. A port outside the ephemeral range and outside Ray's
worker ports is only ever taken by a process that asks for it by number.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
"""Linux's default, used where the kernel's own range cannot be read."""
RAY_WORKER_PORTS = (10002, 19999)
"""``ray start``'s default ``--min-worker-port`` and ``--max-worker-port``."""
LOWEST_PORT = RAY_WORKER_PORTS[1] + 1
HIGHEST_PORT = 65535
MAX_TRIES = 64


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections (inclusive).

    >>> low, high = ephemeral_range()
    >>> 1024 <= low <= high <= 65535
    True
    """
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def quiet_port_ranges(ephemeral: tuple[int, int]) -> list[tuple[int, int]]:
    """The inclusive port ranges no outgoing connection and no Ray worker is given, highest first.

    >>> quiet_port_ranges((32768, 60999))
    [(61000, 65535), (20000, 32767)]
    >>> quiet_port_ranges((1024, 65535))
    []
    """
    low, high = ephemeral
    ranges = [(max(high + 1, LOWEST_PORT), HIGHEST_PORT), (LOWEST_PORT, min(low - 1, HIGHEST_PORT))]
    return [(a, b) for a, b in ranges if a <= b]


def free_listening_port(
    address: str, rng: random.Random | None = None, ephemeral: tuple[int, int] | None = None
) -> int:
    """A port on ``address`` that is free now and that no outgoing connection will be given meanwhile.

    Tries random ports in :func:`quiet_port_ranges`; where the kernel leaves no such range (an ephemeral
    range of the whole port space), falls back to a port the kernel picks.

    >>> port = free_listening_port("127.0.0.1")
    >>> low, high = ephemeral_range()
    >>> not low <= port <= high
    True
    """
    rng = rng or random.Random()
    ranges = quiet_port_ranges(ephemeral or ephemeral_range())
    sizes = [b - a + 1 for a, b in ranges]
    for _ in range(MAX_TRIES if ranges else 0):
        start, end = rng.choices(ranges, weights=sizes)[0]
        port = rng.randint(start, end)
        if _bindable(address, port):
            return port
    return _kernel_port(address)


def _bindable(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def _kernel_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]
