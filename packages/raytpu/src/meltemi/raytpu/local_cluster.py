"""A real multi-node Ray cluster on this machine, with fake slices, for tests and trying things out.

Every node is a separate raylet listening on loopback only (127.0.0.1), with no dashboard, no autoscaler
and a small object store. Hosts of a fake slice carry the same labels and head resource a real TPU slice
has, so ``run_on_slices`` cannot tell the difference; removing a node without grace is what a preemption
looks like.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import ray
import ray._private.ray_constants as ray_constants
from ray.cluster_utils import Cluster

from meltemi.raytpu.slices import POD_TYPE_LABEL, SLICE_NAME_LABEL, WORKER_ID_LABEL, SliceType, slice_type

LOOPBACK = "127.0.0.1"
NO_PRESTART = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}
"""Ray's settings that start no idle worker processes ahead of need: each raylet otherwise starts one per
CPU when the driver connects, about 2 CPU-seconds each: the suite's cluster tests left 11 of them idle
(21 CPU-seconds)."""
_MB = 1024 * 1024


def fake_host_args(kind: SliceType, slice_name: str, worker_id: int) -> dict[str, Any]:
    """``Cluster.add_node`` arguments that make a node look like host ``worker_id`` of a slice.

    >>> from meltemi.raytpu.slices import slice_type
    >>> fake_host_args(slice_type("v4-16"), "s0", 0)["resources"]
    {'TPU': 4, 'TPU-v4-16-head': 1}
    """
    resources: dict[str, float] = {}
    args: dict[str, Any] = {"num_cpus": 0, "num_gpus": 0}
    if kind.kind == "cpu":
        args["num_cpus"] = kind.chips_per_host
    elif kind.kind == "gpu":
        args["num_gpus"] = kind.chips_per_host
    else:
        resources[kind.resource] = kind.chips_per_host
    if worker_id == 0 and kind.head_resource is not None:
        resources[kind.head_resource] = 1
    labels = {SLICE_NAME_LABEL: slice_name, WORKER_ID_LABEL: str(worker_id), POD_TYPE_LABEL: kind.name}
    return args | {"resources": resources, "labels": labels}


class LocalSliceCluster:
    """A loopback Ray cluster of fake slices, connected on entry and torn down on exit.

    ``slices`` lists ``(slice type, how many)``; slices are named ``<type>-<n>``. The head node doubles as
    the first host of the first slice (one raylet fewer to start), so it is the one host that cannot be
    killed.

    This example starts a Ray cluster, so the doctest run skips it (``+SKIP``); the cluster tests run one:

    >>> with LocalSliceCluster([("cpu-1", 1)]) as cluster:  # doctest: +SKIP
    ...     cluster.slice_names()
    ['cpu-1-0']
    """

    def __init__(self, slices: Sequence[tuple[str | SliceType, int]] = (), *, object_store_mb: int = 100):
        if object_store_mb < 75:
            raise ValueError(f"object_store_mb must be at least 75 (Ray's minimum), got {object_store_mb}")
        for kind, count in slices:
            if not isinstance(count, int) or count < 1:
                raise ValueError(f"slice count for {kind} must be a positive integer, got {count!r}")
        wanted = [slice_type(kind) for kind, count in slices for _ in range(count)]
        self._object_store = object_store_mb * _MB
        self._nodes: dict[str, list[Any]] = {}
        self._types: dict[str, SliceType] = {}
        first = self._new_slice(wanted[0]) if wanted else None
        head_args = fake_host_args(wanted[0], first, 0) if first else {"num_cpus": 0}
        with loopback_only():
            # No autoscaler monitor either: a local cluster's nodes are the ones started here. No workers
            # started ahead of need (`NO_PRESTART`): a slice's host is an actor with its own process.
            head = self._node_args(
                include_dashboard=False, no_monitor=True, _system_config=NO_PRESTART, **head_args
            )
            self._cluster = Cluster(initialize_head=True, head_node_args=head)
            try:
                if first:
                    self._nodes[first].append(self._cluster.head_node)
                    self._start_hosts(first, range(1, wanted[0].hosts))
                for kind in wanted[1:]:
                    name = self._new_slice(kind)
                    self._start_hosts(name, range(kind.hosts))
                self._cluster.wait_for_nodes()
                ray.init(address=self._cluster.address, include_dashboard=False)
            except BaseException:
                self._cluster.shutdown()
                raise

    @property
    def address(self) -> str:
        return self._cluster.address

    def slice_names(self) -> list[str]:
        return sorted(self._nodes)

    def node_ids(self, slice_name: str) -> list[str]:
        """The Ray node ids of a fake slice's hosts, in worker order."""
        return [node.node_id for node in self._nodes[slice_name]]

    def kill_host(self, node_id: str) -> None:
        """Kill one host's node without grace, the way a preemption does (never the head node)."""
        if node_id == self._cluster.head_node.node_id:
            raise ValueError("the head node holds this driver's connection; kill another host")
        for hosts in self._nodes.values():
            for node in hosts:
                if node.node_id == node_id:
                    hosts.remove(node)
                    self._cluster.remove_node(node, allow_graceful=False)
                    return
        raise KeyError(f"no live fake host with node id {node_id!r}")

    def shutdown(self) -> None:
        ray.shutdown()
        self._cluster.shutdown()
        self._nodes.clear()

    def __enter__(self) -> LocalSliceCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _new_slice(self, kind: SliceType) -> str:
        name = f"{kind.name}-{sum(1 for t in self._types.values() if t == kind)}"
        self._types[name] = kind
        self._nodes[name] = []
        return name

    def _start_hosts(self, name: str, workers: Iterable[int]) -> list[Any]:
        kind = self._types[name]
        started = [
            self._cluster.add_node(wait=False, **self._node_args(**fake_host_args(kind, name, worker)))
            for worker in workers
        ]
        self._nodes[name].extend(started)
        return started

    def _node_args(self, **args: Any) -> dict[str, Any]:
        return {"node_ip_address": LOOPBACK, "object_store_memory": self._object_store} | args


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Keep Ray on loopback and in this interpreter while starting local nodes and connecting to them.

    Ray resolves "127.0.0.1" to the machine's routable address unless clusters are switched off, and under
    ``uv run`` it would ship the working directory to every worker and rebuild the environment there.
    """
    # Ray's switch for each, read from the environment by child processes and from ray_constants here.
    switches = {"ENABLE_RAY_CLUSTER": "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    switches["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
    present = [c for c in switches if hasattr(ray_constants, c)]  # older Rays have no uv integration
    saved = {c: getattr(ray_constants, c) for c in present}
    saved_env = {v: os.environ.get(v) for v in switches.values()}
    for constant in present:
        setattr(ray_constants, constant, False)
    os.environ.update({variable: "0" for variable in saved_env})
    try:
        yield
    finally:
        for constant, value in saved.items():
            setattr(ray_constants, constant, value)
        for variable, value in saved_env.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
