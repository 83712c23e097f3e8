"""The environment a multi-host JAX job needs on each host, and the workload's view of it.

Every host gets the standard names: ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID`` (for ``jax.distributed.initialize``), the ``MEGASCALE_*`` variables when the job spans
several slices, and ``MELTEMI_*`` variables saying which slice, host and attempt it is.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from meltemi.raytpu.errors import NotInJobError

DEFAULT_MEGASCALE_PORT = 8081

_SLICE_ID = "MELTEMI_SLICE_ID"
_SLICE_NAME = "MELTEMI_SLICE_NAME"
_HOST_ID = "MELTEMI_HOST_ID"
_HOSTS_PER_SLICE = "MELTEMI_HOSTS_PER_SLICE"
_ATTEMPT = "MELTEMI_ATTEMPT"
RESERVED_PREFIXES = (
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "JAX_PROCESS_ID",
    "MEGASCALE_",
    "MELTEMI_",
)


@dataclasses.dataclass(frozen=True)
class HostEnv:
    """Where this host sits in the job: its process index among all hosts, its slice and its attempt.

    >>> env = HostEnv("10.0.0.1:8476", num_processes=4, process_id=3, slice_id=1, num_slices=2,
    ...               slice_name="s1", host_id=1, hosts_per_slice=2, attempt=0)
    >>> env.to_environ()["MEGASCALE_SLICE_ID"], env.jax_distributed_kwargs()["process_id"]
    ('1', 3)
    """

    coordinator_address: str
    num_processes: int
    process_id: int
    slice_id: int
    num_slices: int
    slice_name: str
    host_id: int
    hosts_per_slice: int
    attempt: int
    megascale_port: int = DEFAULT_MEGASCALE_PORT

    def jax_distributed_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``jax.distributed.initialize`` on this host.

        The coordinator (process 0) listens only on the address the others dial, not on every interface.
        """
        return {
            "coordinator_address": self.coordinator_address,
            "coordinator_bind_address": self.coordinator_address,
            "num_processes": self.num_processes,
            "process_id": self.process_id,
        }

    def to_environ(self) -> dict[str, str]:
        """The environment variables that describe this host to the workload."""
        env = {
            "JAX_COORDINATOR_ADDRESS": self.coordinator_address,
            "JAX_NUM_PROCESSES": str(self.num_processes),
            "JAX_PROCESS_ID": str(self.process_id),
            _SLICE_ID: str(self.slice_id),
            _SLICE_NAME: self.slice_name,
            _HOST_ID: str(self.host_id),
            _HOSTS_PER_SLICE: str(self.hosts_per_slice),
            _ATTEMPT: str(self.attempt),
        }
        if self.num_slices > 1:
            env |= {
                "MEGASCALE_COORDINATOR_ADDRESS": self.coordinator_address.rsplit(":", 1)[0],
                "MEGASCALE_NUM_SLICES": str(self.num_slices),
                "MEGASCALE_SLICE_ID": str(self.slice_id),
                "MEGASCALE_PORT": str(self.megascale_port),
            }
        return env


def current_host(environ: Mapping[str, str] | None = None) -> HostEnv:
    """This host's place in the job, read back from the environment ``run_on_slices`` set.

    Call it inside the function given to ``run_on_slices``; outside one it raises ``NotInJobError``.
    """
    environ = os.environ if environ is None else environ
    if _SLICE_ID not in environ:
        raise NotInJobError("current_host() is only available inside a function run by run_on_slices")
    return HostEnv(
        coordinator_address=environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(environ["JAX_NUM_PROCESSES"]),
        process_id=int(environ["JAX_PROCESS_ID"]),
        slice_id=int(environ[_SLICE_ID]),
        num_slices=int(environ.get("MEGASCALE_NUM_SLICES", "1")),
        slice_name=environ[_SLICE_NAME],
        host_id=int(environ[_HOST_ID]),
        hosts_per_slice=int(environ[_HOSTS_PER_SLICE]),
        attempt=int(environ[_ATTEMPT]),
        megascale_port=int(environ.get("MEGASCALE_PORT", DEFAULT_MEGASCALE_PORT)),
    )


def host_envs(
    coordinator_address: str, slice_names: list[str], hosts_per_slice: int, attempt: int
) -> list[HostEnv]:
    """One ``HostEnv`` per host of the job, in process order (slice by slice, host by host).

    >>> [e.process_id for e in host_envs("127.0.0.1:1234", ["a", "b"], 2, attempt=0)]
    [0, 1, 2, 3]
    """
    num_slices = len(slice_names)
    return [
        HostEnv(
            coordinator_address=coordinator_address,
            num_processes=num_slices * hosts_per_slice,
            process_id=slice_id * hosts_per_slice + host_id,
            slice_id=slice_id,
            num_slices=num_slices,
            slice_name=name,
            host_id=host_id,
            hosts_per_slice=hosts_per_slice,
            attempt=attempt,
        )
        for slice_id, name in enumerate(slice_names)
        for host_id in range(hosts_per_slice)
    ]
