"""The memory this machine can give a program on its CPU, whose devices share it: a train step, or a model
being loaded, larger than that is refused before it is made, instead of being killed by the system.

>>> HostMemory(8 * GIB, "available").shortfall(12 * GIB, 1, "the train step")
'the train step needs 12.0 GiB of memory and this machine has 8.0 GiB available'
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class HostMemory:
    """The memory this machine can give a run now, in bytes, and where the figure comes from: what Linux
    says is available (``MemAvailable``: free, and what the page cache would give back), else the physical
    memory."""

    available: int
    source: str

    MEMINFO = Path("/proc/meminfo")

    @staticmethod
    def now(meminfo: Path = MEMINFO) -> HostMemory | None:
        """This machine's figure (None when neither can be read)."""
        try:
            for line in meminfo.read_text().splitlines():
                name, _, value = line.partition(":")
                if name == "MemAvailable" and value.split()[1:] == ["kB"]:
                    return HostMemory(int(value.split()[0]) * 1024, "available")
        except (OSError, ValueError, IndexError):
            pass
        try:
            return HostMemory(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "in all")
        except (ValueError, OSError, AttributeError):
            return None

    def shortfall(self, per_device: int, devices: int, what: str) -> str | None:
        """Why ``what`` (a program XLA planned at ``per_device`` bytes on each of ``devices`` CPU devices, which
        share this machine's memory) cannot run here, or None when it fits.

        >>> HostMemory(8 * GIB, "available").shortfall(3 * GIB, 4, "the train step")
        'the train step needs 12.0 GiB of memory (3.00 GiB per device, 4 CPU devices) and this machine has 8.0 GiB available'
        >>> HostMemory(8 * GIB, "available").shortfall(3 * GIB, 2, "the train step") is None
        True
        """  # noqa: E501
        needed = per_device * devices
        if needed <= self.available:
            return None
        spread = f" ({per_device / GIB:.2f} GiB per device, {devices} CPU devices)" if devices > 1 else ""
        return (
            f"{what} needs {needed / GIB:.1f} GiB of memory{spread} and this machine has "
            f"{self.available / GIB:.1f} GiB {self.source}"
        )
