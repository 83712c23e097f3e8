"""Claiming whole slices: one placement group per slice, one bundle pinned to each of its hosts.

The bundle on worker 0 also takes the slice's head resource (``TPU-v5litepod-256-head``), so two jobs can
never share a slice, and a slice that lost a host is never claimed until the host is back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from meltemi.raytpu.inventory import SliceInfo, discover_slices, host_label_selector
from meltemi.raytpu.slices import SliceType

PLACEMENT_GROUP_PREFIX = "meltemi-raytpu"
_GRACE_S = 2.0


@dataclasses.dataclass(frozen=True)
class SliceClaim:
    """A slice this job holds: what it is, and the placement group that holds it."""

    info: SliceInfo
    placement_group: PlacementGroup


def host_bundle(slice_type: SliceType, worker_id: int) -> dict[str, float]:
    """What one host's bundle reserves: its chips, plus the head resource on worker 0."""
    bundle = {slice_type.resource: float(slice_type.chips_per_host)}
    if worker_id == 0 and slice_type.head_resource is not None:
        bundle[slice_type.head_resource] = 1.0
    return bundle


def placement_group_name(job_name: str, slice_name: str) -> str:
    return f"{PLACEMENT_GROUP_PREFIX}/{job_name}/{slice_name}"


def intact_slices(slice_type: SliceType) -> list[SliceInfo]:
    """Slices of this type whose hosts are all alive (claimed or not)."""
    return [s for s in discover_slices(slice_type, ray.nodes()) if s.intact]


def claim_slices(
    slice_type: SliceType, acceptable_counts: Sequence[int], *, job_name: str, wait_s: float
) -> list[SliceClaim]:
    """Claim the largest acceptable number of intact, unclaimed slices; ``[]`` when not even the smallest.

    Every intact slice is asked for at once. Once the smallest acceptable number is granted (within
    ``wait_s`` seconds), the others get a short grace, since a free slice is granted at once and a held one
    never; the granted ones are kept up to the largest acceptable count and every other request withdrawn.
    """
    candidates = intact_slices(slice_type)
    if len(candidates) < min(acceptable_counts):
        return []
    groups = [
        placement_group(
            [host_bundle(slice_type, h.worker_id) for h in info.hosts],
            strategy="STRICT_SPREAD",
            name=placement_group_name(job_name, info.name),
            bundle_label_selector=[host_label_selector(info, h) for h in info.hosts],
        )
        for info in candidates
    ]
    ready_refs = [g.ready() for g in groups]
    done, rest = ray.wait(ready_refs, num_returns=min(acceptable_counts), timeout=wait_s)
    if done and rest:  # the others are either free, then ready in a moment, or held by another job
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=min(wait_s, _GRACE_S))
        done += more
    ready = [i for i, ref in enumerate(ready_refs) if ref in set(done)]
    count = max((c for c in acceptable_counts if c <= len(ready)), default=0)
    keep = set(ready[:count])
    for i, group in enumerate(groups):
        if i not in keep:
            remove_placement_group(group)
    return [SliceClaim(candidates[i], groups[i]) for i in sorted(keep)]


def release(claims: Sequence[SliceClaim]) -> None:
    """Give the slices back (this also ends any task still running in them)."""
    for claim in claims:
        remove_placement_group(claim.placement_group)
