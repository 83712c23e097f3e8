"""The Ray tasks that run on a slice's hosts: the workload itself, and the coordinator-port probe.

Each host task runs in a fresh worker process (``max_calls=1``): an accelerator runtime such as libtpu can
be held by one process only, and ``jax.distributed`` can be initialized once per process.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from meltemi.raytpu.claims import SliceClaim
from meltemi.raytpu.ports import free_listening_port
from meltemi.raytpu.slices import SliceType


@ray.remote(max_calls=1, max_retries=0, num_cpus=0)
def run_host(fn: Callable[[], Any], environ: Mapping[str, str]) -> Any:
    """Run the workload on this host with its multi-host environment in place."""
    os.environ.update(environ)
    return fn()


@ray.remote(max_retries=0, num_cpus=0)
def coordinator_endpoint() -> str:
    """This host's address and a free port for ``jax.distributed``'s coordinator.

    The port lies outside the kernel's range for outgoing connections, so none of the connections the host
    opens before the coordinator starts can take it (``ports.free_listening_port``).
    """
    address = ray.util.get_node_ip_address()
    return f"{address}:{free_listening_port(address)}"


def host_task_options(
    slice_type: SliceType, claim: SliceClaim, host_id: int, runtime_env: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Ray options that put a task on one host of a claimed slice, holding that host's chips."""
    options: dict[str, Any] = {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            claim.placement_group, placement_group_bundle_index=host_id
        ),
        "name": f"meltemi-raytpu:{claim.info.name}:host{host_id}",
    }
    chips = slice_type.chips_per_host
    if slice_type.kind == "gpu":
        options["num_gpus"] = chips
    elif slice_type.kind == "cpu":
        options["num_cpus"] = chips
    else:
        options["resources"] = {slice_type.resource: chips}
    if runtime_env is not None:
        options["runtime_env"] = dict(runtime_env)
    return options
