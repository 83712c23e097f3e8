"""Which slices the Ray cluster has right now, read from its live nodes' labels and resources."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from meltemi.raytpu.slices import NODE_ID_LABEL, POD_TYPE_LABEL, SLICE_NAME_LABEL, WORKER_ID_LABEL, SliceType


@dataclasses.dataclass(frozen=True)
class Host:
    """One live host of a slice: its Ray node, its address, and its worker index within the slice."""

    node_id: str
    address: str
    worker_id: int


@dataclasses.dataclass(frozen=True)
class SliceInfo:
    """A slice as the cluster sees it; ``intact`` when every one of its hosts is alive."""

    name: str
    slice_type: SliceType
    hosts: tuple[Host, ...]

    @property
    def intact(self) -> bool:
        return [h.worker_id for h in self.hosts] == list(range(self.slice_type.hosts))


def discover_slices(slice_type: SliceType, nodes: Iterable[Mapping[str, Any]]) -> list[SliceInfo]:
    """Group live nodes (as ``ray.nodes()`` lists them) into slices of ``slice_type``, sorted by name.

    TPU and fake CPU slices are grouped by their slice-name label; a GPU node with enough GPUs is a
    one-host slice named by its node id.

    >>> from meltemi.raytpu.slices import cpu_slice
    >>> node = {"Alive": True, "NodeID": "n0", "NodeManagerAddress": "127.0.0.1", "Resources": {"CPU": 1},
    ...         "Labels": {"ray.io/tpu-slice-name": "s0", "ray.io/tpu-worker-id": "0",
    ...                    "ray.io/tpu-pod-type": "cpu-1"}}
    >>> [s.name for s in discover_slices(cpu_slice(1), [node]) if s.intact]
    ['s0']
    """
    alive = [node for node in nodes if node.get("Alive")]
    if slice_type.kind == "gpu":
        return sorted(
            (
                SliceInfo(node["NodeID"], slice_type, (_host(node, 0),))
                for node in alive
                if node.get("Resources", {}).get("GPU", 0) >= slice_type.chips_per_host
            ),
            key=lambda s: s.name,
        )
    members: dict[str, list[Host]] = defaultdict(list)
    for node in alive:
        labels = node.get("Labels") or {}
        if labels.get(POD_TYPE_LABEL) != slice_type.name or SLICE_NAME_LABEL not in labels:
            continue
        worker_id = labels.get(WORKER_ID_LABEL, "")
        if worker_id.isdigit():
            members[labels[SLICE_NAME_LABEL]].append(_host(node, int(worker_id)))
    return [
        SliceInfo(name, slice_type, tuple(sorted(hosts, key=lambda h: h.worker_id)))
        for name, hosts in sorted(members.items())
    ]


def host_label_selector(info: SliceInfo, host: Host) -> dict[str, str]:
    """The node labels that pin a placement-group bundle to exactly this host."""
    if info.slice_type.kind == "gpu":
        return {NODE_ID_LABEL: host.node_id}
    return {SLICE_NAME_LABEL: info.name, WORKER_ID_LABEL: str(host.worker_id)}


def _host(node: Mapping[str, Any], worker_id: int) -> Host:
    return Host(node["NodeID"], node.get("NodeManagerAddress", ""), worker_id)
