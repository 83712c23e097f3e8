"""``python -m meltemi.raytpu status``: the slices of a running Ray cluster and the jobs that hold them.

A slice is "free" when no placement group holds it, otherwise it names the job (``run_on_slices`` names its
placement groups ``meltemi-raytpu/<job>/<slice>``). Only the GCS is asked, so no dashboard is needed.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from meltemi.raytpu.slices import POD_TYPE_LABEL, SLICE_NAME_LABEL, WORKER_ID_LABEL


def slice_rows(
    nodes: Iterable[Mapping[str, Any]], placement_groups: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One row per slice: its name, type, live hosts, and who holds it.

    >>> node = {"Alive": True, "NodeID": "n0", "Labels": {"ray.io/tpu-slice-name": "s0",
    ...         "ray.io/tpu-worker-id": "0", "ray.io/tpu-pod-type": "v4-8"}}
    >>> pgs = {"p": {"name": "meltemi-raytpu/train/s0", "state": "CREATED", "bundles_to_node_id": {0: "n0"}}}
    >>> slice_rows([node], pgs)[0]["held_by"]
    'meltemi-raytpu/train/s0'
    """
    holders: dict[str, set[str]] = defaultdict(set)
    for group in placement_groups.values():
        if group.get("state") == "CREATED":
            for node_id in (group.get("bundles_to_node_id") or {}).values():
                holders[node_id].add(group.get("name") or "(unnamed placement group)")
    slices: dict[str, dict[str, Any]] = {}
    for node in nodes:
        labels = node.get("Labels") or {}
        if not node.get("Alive") or SLICE_NAME_LABEL not in labels:
            continue
        name = labels[SLICE_NAME_LABEL]
        row = slices.setdefault(
            name, {"slice": name, "type": labels.get(POD_TYPE_LABEL, "?"), "hosts": [], "held": set()}
        )
        row["hosts"].append(int(labels.get(WORKER_ID_LABEL, -1)))
        row["held"] |= holders.get(node["NodeID"], set())
    return [
        {
            "slice": row["slice"],
            "type": row["type"],
            "hosts_alive": sorted(row["hosts"]),
            "held_by": ", ".join(sorted(row["held"])) or "free",
        }
        for row in sorted(slices.values(), key=lambda r: r["slice"])
    ]


def format_rows(rows: Sequence[Mapping[str, Any]]) -> str:
    """A plain text table of ``slice_rows``."""
    if not rows:
        return "no slices: no live node carries a ray.io/tpu-slice-name label"
    table = [("SLICE", "TYPE", "HOSTS ALIVE", "HELD BY")] + [
        (r["slice"], r["type"], ",".join(map(str, r["hosts_alive"])), r["held_by"]) for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in table
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m meltemi.raytpu", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="list slices and what runs on them")
    status.add_argument("--address", default="auto", help="Ray cluster address (default: the local one)")
    args = parser.parse_args(argv)

    import ray

    from meltemi.raytpu.local_cluster import LOOPBACK, loopback_only

    staying_local = loopback_only() if args.address.startswith((LOOPBACK, "localhost")) else nullcontext()
    try:
        with staying_local:
            ray.init(
                address=args.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False
            )
    except ConnectionError as error:
        print(f"no Ray cluster at {args.address!r}: {error}", file=sys.stderr)
        return 1
    try:
        print(format_rows(slice_rows(ray.nodes(), ray.util.placement_group_table())))
    finally:
        ray.shutdown()
    return 0
