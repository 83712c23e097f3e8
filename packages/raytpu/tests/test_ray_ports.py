"""The coordinator's port: free when chosen, and outside every range another process is handed ports from."""

import random
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meltemi.raytpu import free_listening_port
from meltemi.raytpu.ports import (
    DEFAULT_EPHEMERAL_RANGE,
    RAY_WORKER_PORTS,
    ephemeral_range,
    quiet_port_ranges,
)


@st.composite
def port_ranges(draw):
    low = draw(st.integers(1024, 65535))
    return low, draw(st.integers(low, 65535))


@given(port_ranges())
def test_quiet_ranges_avoid_the_ephemeral_ports_and_rays_worker_ports(ephemeral):
    for start, end in quiet_port_ranges(ephemeral):
        assert 20000 <= start <= end <= 65535
        for busy_start, busy_end in (ephemeral, RAY_WORKER_PORTS):
            assert end < busy_start or busy_end < start


@given(port_ranges())
def test_quiet_ranges_are_every_port_from_20000_the_kernel_keeps_for_outgoing_connections(ephemeral):
    low, high = ephemeral
    quiet = {port for start, end in quiet_port_ranges(ephemeral) for port in range(start, end + 1)}
    assert quiet == {port for port in range(20000, 65536) if not low <= port <= high}


class Scripted(random.Random):
    """A generator whose ports come from a list, to put the choice on a port that is taken."""

    def __init__(self, ports):
        super().__init__(0)
        self.ports = list(ports)

    def randint(self, a, b):
        return self.ports.pop(0)


def test_a_port_something_listens_on_is_passed_over():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        ephemeral = (1024, busy - 1) if busy > 21000 else (busy + 1, 65535)
        quiet = quiet_port_ranges(ephemeral)
        assert any(start <= busy <= end for start, end in quiet)
        other = next(p for p in range(quiet[0][0], quiet[0][1] + 1) if p != busy)
        assert free_listening_port("127.0.0.1", Scripted([busy, other]), ephemeral) == other


def test_with_no_quiet_range_the_kernel_picks_the_port():
    port = free_listening_port("127.0.0.1", Scripted([]), ephemeral=(1024, 65535))
    with socket.socket() as check:
        check.bind(("127.0.0.1", port))


@pytest.mark.parametrize("text", ["", "garbage", "1 2 3"])
def test_an_unreadable_ephemeral_range_falls_back_to_linuxs_default(tmp_path, text):
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    assert ephemeral_range(path) == DEFAULT_EPHEMERAL_RANGE
    assert ephemeral_range(tmp_path / "absent") == DEFAULT_EPHEMERAL_RANGE


def test_the_kernels_range_is_read_as_two_numbers(tmp_path):
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ephemeral_range(path) == (40000, 50000)
