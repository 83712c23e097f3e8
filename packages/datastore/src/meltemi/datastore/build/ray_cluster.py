"""A build's tasks as Ray tasks over a cluster (the datastore's `[ray]` extra): each job a task that Ray
retries on another node when the one running it dies (`max_retries`), its result handed back as it ends.

Every node must have `meltemi-datastore` installed (a Ray cluster's nodes share one environment), and reach
the store's output location (a bucket, or a disk every node mounts at the same path). Ray does the
scheduling, the transport and the retries; this module only submits the jobs, keeps a bounded number in
flight, and turns Ray's errors into the datastore's one-line ones.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from meltemi.datastore.errors import ClusterError

_Result = TypeVar("_Result")
_CONNECTING = threading.Lock()  # builds started side by side in threads connect once
RETRIES = 4  # tries of a task beyond its first when its worker or node dies (preemption), Ray's own
CONNECT_SECONDS = 3.0


def _on_a_node(function: Callable[..., _Result], job: tuple[Any, ...]) -> tuple[str, _Result]:
    """Run one job on a worker of the cluster: its result, with the node that ran it."""
    import ray

    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one task per CPU: the tasks are the parallelism
    return ray.get_runtime_context().get_node_id(), function(*job)


def _reachable(address: str) -> str | None:
    """Why `host:port` cannot be connected to (None when it can): said in seconds, not after Ray's own
    minute of retries."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return "not an address: give auto (the cluster `ray start` made on this machine) or HOST:PORT"
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS):
            return None
    except OSError as error:
        return f"nothing answers there ({error.strerror or error})"


class RayCluster:
    """The Ray cluster at `address` (`auto`: the one `ray.init(address="auto")` finds; `host:port`: its
    head's GCS address), connected on first use; jobs are tasks of one CPU each, retried when lost."""

    def __init__(self, address: str):
        self.address = address
        self.workers = 1
        self._nodes: set[str] = set()
        self._remote: Any = None

    def _connect(self) -> Any:
        try:
            import ray
        except ModuleNotFoundError:
            raise ClusterError(
                f"--ray {self.address}: Ray is not installed; pip install 'meltemi-datastore[ray]'"
            ) from None
        with _CONNECTING:
            if not ray.is_initialized():
                self._init(ray)
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        return ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(_on_a_node)

    def _init(self, ray: Any) -> None:
        """Connect this process to the cluster, or say in one line why it cannot."""
        address = self.address
        if address == "auto":  # RAY_ADDRESS, or the head the last `ray start` here recorded: it must answer
            try:
                address = ray._private.services.canonicalize_bootstrap_address_or_die(address)
            except ConnectionError as error:
                raise ClusterError(f"no Ray cluster at auto: {str(error).strip().splitlines()[0]}") from None
        problem = _reachable(address)
        if problem is not None:
            shown = self.address if address == self.address else f"{self.address} ({address})"
            raise ClusterError(f"no Ray cluster at {shown}: {problem}")
        # Under `uv run`, Ray's uv hook would run every worker with `uv run` in a copy of the working
        # directory (and refuse one without the project): the nodes' installed environment is used instead.
        constants = ray._private.ray_constants
        uv_hook = getattr(constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", None)
        try:
            if uv_hook is not None:
                constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
            ray.init(address=self.address, log_to_driver=False, logging_level="WARNING")
        except (ConnectionError, RuntimeError, ValueError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ClusterError(f"no Ray cluster at {self.address}: {first}") from None
        finally:
            if uv_hook is not None:
                constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = uv_hook

    def connected_workers(self) -> int:
        """Connect (once), and say how many CPUs the cluster has: the tasks it runs at once."""
        if self._remote is None:
            self._remote = self._connect()
        return self.workers

    def run(self, function: Callable[..., _Result], jobs: Sequence[tuple[Any, ...]]) -> Iterator[_Result]:
        import ray
        from ray.exceptions import RayTaskError

        if self._remote is None:
            self._remote = self._connect()
        window = max(8, 2 * self.workers)
        waiting = list(reversed(jobs))
        running: dict[Any, tuple[Any, ...]] = {}
        try:
            while waiting or running:
                while waiting and len(running) < window:
                    job = waiting.pop()
                    running[self._remote.remote(function, job)] = job
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    running.pop(ref)
                    try:
                        node, result = ray.get(ref)
                    except RayTaskError as error:  # the job's own exception, raised as it was
                        cause = error.cause if isinstance(error.cause, BaseException) else error
                        raise cause from None
                    except ray.exceptions.RayError as error:
                        raise ClusterError(
                            f"the Ray cluster at {self.address} lost a task {RETRIES + 1} times "
                            f"({type(error).__name__}); the parts finished so far are kept: run the build "
                            "again when the cluster is whole"
                        ) from None
                    self._nodes.add(node)
                    yield result
        finally:
            for ref in running:
                ray.cancel(ref)

    @property
    def where(self) -> str:
        return f"the Ray cluster at {self.address} ({self.workers} CPUs)"

    @property
    def nodes(self) -> int:
        return len(self._nodes)

    def __enter__(self) -> RayCluster:
        self.connected_workers()  # before the build writes anything, and so `workers` is the cluster's
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass
