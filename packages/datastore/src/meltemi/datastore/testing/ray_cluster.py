"""A real multi-node Ray cluster on loopback for builds on a cluster (`build_store(cluster=...)`), whose nodes
can be killed as machines are lost; Ray (the `[ray]` extra) is imported only when one starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from meltemi.datastore.testing.object_stores import LOOPBACK

# Ray's switches for a cluster on loopback, run from this interpreter: by their environment variable (read by
# the nodes and by any driver started as a subprocess) and, where the running process has already read it,
# by their constant in `ray._private.ray_constants`. Under `uv run`, Ray would otherwise ship the working
# directory to every worker and rebuild the environment there.
_RAY_SWITCHES = {
    "ENABLE_RAY_CLUSTER": "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "RAY_ENABLE_UV_RUN_RUNTIME_ENV",
}
RAY_DRIVER_ENVIRON = {variable: "0" for variable in _RAY_SWITCHES.values()}  # for a driver in a subprocess


class LocalRayCluster:
    """A real multi-node Ray cluster on this machine (the datastore's `[ray]` extra), for tests and
    benchmarks of builds on a cluster: a head node with `head_cpus` CPUs and `workers` nodes of one CPU each,
    every node its own raylet on loopback, with no dashboard, no autoscaler and a small object store; this
    process is connected to it (`ray.init`) until `shutdown`.

    `environ` is set for the nodes (None removes a variable): their workers inherit it, as a real node's
    workers inherit what its `ray start` was given, so an emulator's endpoint reaches the tasks.
    `kill_node` ends a node without grace, its workers first, the way a machine is lost; `system_config`
    is Ray's own settings for the cluster (such as how soon a silent node is declared dead).

    This example starts a Ray cluster, so the doctest run skips it (``+SKIP``); the cluster tests run one:

    >>> with LocalRayCluster(workers=2) as cluster:  # doctest: +SKIP
    ...     build_store(files, tokenizer, "s3://bucket/store", cluster=cluster.address)
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        head_cpus: int = 0,
        environ: dict[str, str | None] | None = None,
        object_store_mb: int = 80,
        system_config: dict[str, Any] | None = None,
    ):
        import ray
        from ray.cluster_utils import Cluster

        self._environ = dict(environ or {})
        self._node_args = {"node_ip_address": LOOPBACK, "object_store_memory": object_store_mb << 20}
        with self._ray_environment():
            head = self._node_args | {"num_cpus": head_cpus, "include_dashboard": False, "no_monitor": True}
            if system_config:
                head["_system_config"] = system_config
            self._cluster = Cluster(initialize_head=True, head_node_args=head)
            try:
                for _ in range(workers):
                    self._cluster.add_node(wait=False, num_cpus=1, **self._node_args)
                self._cluster.wait_for_nodes()
                ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
            except BaseException:
                self._cluster.shutdown()
                raise

    @property
    def address(self) -> str:
        """The head's `host:port`: what `build_store(cluster=...)` and `--ray` take."""
        return self._cluster.address

    @property
    def nodes(self) -> list[Any]:
        """The worker nodes (not the head), oldest first."""
        return list(self._cluster.worker_nodes)

    def add_node(self) -> Any:
        """Start one more worker node of one CPU, and wait until the cluster counts it."""
        with self._ray_environment():
            node = self._cluster.add_node(wait=False, num_cpus=1, **self._node_args)
            self._cluster.wait_for_nodes()
        return node

    @staticmethod
    def worker_pids(node: Any) -> set[int]:
        """The processes a node's raylet started (its workers, and its agents)."""
        raylet = node.all_processes["raylet"][0].process.pid
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # a process that ended while read
                continue
            if parent == raylet:
                found.add(int(stat.parent.name))
        return found

    def kill_node(self, node: Any) -> None:
        """End a worker node without grace: SIGKILL to its workers, then to its raylet and the rest."""
        import signal

        for pid in self.worker_pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._cluster.remove_node(node, allow_graceful=False)

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self._cluster.shutdown()

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    @contextlib.contextmanager
    def _ray_environment(self) -> Iterator[None]:
        """`environ` and Ray's loopback switches in `os.environ` (and Ray's constants) while nodes start and
        this process connects; everything as it was after."""
        import ray._private.ray_constants as constants

        changes: dict[str, str | None] = {**RAY_DRIVER_ENVIRON, **self._environ}
        saved = {name: os.environ.get(name) for name in changes}
        present = [name for name in _RAY_SWITCHES if hasattr(constants, name)]  # older Rays lack uv's
        saved_constants = {name: getattr(constants, name) for name in present}
        for name in present:
            setattr(constants, name, False)
        for name, value in changes.items():
            _set_variable(name, value)
        try:
            yield
        finally:
            for name, value in saved_constants.items():
                setattr(constants, name, value)
            for name, value in saved.items():
                _set_variable(name, value)


def _set_variable(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
