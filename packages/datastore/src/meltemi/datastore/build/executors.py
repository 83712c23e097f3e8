"""What runs a build's tasks: this process, local worker processes, or a Ray cluster (`ray_cluster`).

The plan decides the work (units to tokenize, segments to assemble); an `Executor` only runs functions over
job arguments and hands back each result as it comes, so the store's bytes never depend on which one ran
them, nor on how many workers it had or in what order they finished.

>>> with InProcess() as executor:
...     sorted(executor.run(pow, [(2, 3), (3, 2)]))
[8, 9]
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol, TypeVar

_Result = TypeVar("_Result")


class Executor(Protocol):
    """Runs `function(*job)` for every job, anywhere, and yields the results as they finish (in any order).

    A job that raises ends the run with its exception (the others are cancelled); a worker lost to a crash
    or a preemption is the executor's to retry. `workers` is how many jobs run at once, `where` says where
    (for the progress line and the report), and `nodes` how many machines have run jobs so far."""

    workers: int

    def run(self, function: Callable[..., _Result], jobs: Sequence[tuple[Any, ...]]) -> Iterator[_Result]: ...

    @property
    def where(self) -> str: ...

    @property
    def nodes(self) -> int: ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc_info: object) -> None: ...


class InProcess:
    """Every job in this process, one after another (a build with one worker, or a `memory://` store)."""

    workers = 1

    def run(self, function: Callable[..., _Result], jobs: Sequence[tuple[Any, ...]]) -> Iterator[_Result]:
        for job in jobs:
            yield function(*job)

    @property
    def where(self) -> str:
        return "this process"

    @property
    def nodes(self) -> int:
        return 1

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


def quiet_worker() -> None:
    """Worker-process setup: one tokenizer thread each, since the processes are the parallelism; Ctrl-C
    (sent to every process of the terminal's group) is the driver's to act on, so a worker finishes its
    unit instead of printing a traceback."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class LocalProcesses:
    """Jobs in `workers` processes of this machine (spawned, so any caller's threads are safe), at most
    `workers` in flight; call it under `if __name__ == "__main__":`, as multiprocessing requires."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def run(self, function: Callable[..., _Result], jobs: Sequence[tuple[Any, ...]]) -> Iterator[_Result]:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=quiet_worker)
        waiting = list(reversed(jobs))
        running: set[Future] = set()
        try:
            while waiting or running:
                while waiting and len(running) < 2 * self.workers:  # a few queued, so no worker idles
                    running.add(self._pool.submit(function, *waiting.pop()))
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
        finally:
            for future in running:
                future.cancel()

    @property
    def where(self) -> str:
        return f"{self.workers} local processes"

    @property
    def nodes(self) -> int:
        return 1

    def __enter__(self) -> LocalProcesses:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def executor_for(workers: int, cluster: str | None) -> Executor:
    """The executor a build asks for: a Ray cluster at `cluster` (`auto`, or `host:port`), else `workers`
    local processes, else this process.

    >>> executor_for(1, None).where, executor_for(4, None).where
    ('this process', '4 local processes')
    """
    if cluster is not None:
        from meltemi.datastore.build.ray_cluster import RayCluster  # the [ray] extra, only when asked for

        return RayCluster(cluster)
    return InProcess() if workers <= 1 else LocalProcesses(workers)
