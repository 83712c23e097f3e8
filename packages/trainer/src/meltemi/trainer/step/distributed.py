"""Several processes, one run: joining the JAX job, agreeing on host-side decisions, one shared token.

Every process of a multi-host run steps in lockstep, so a decision taken on the host (stop for a signal,
checkpoint because time passed) must be taken by all of them at the same step: ``agree`` gathers each
process's flags and returns, to all of them, which flags any process raised. With one process these are
plain local values and no collective is run.

>>> agree([True, False])
[True, False]
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

from meltemi.trainer.step.gloo_lines import drop_gloo_lines

ENVIRONMENT = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def initialize_from_environment() -> bool:
    """Join a multi-process JAX job when the environment describes one (as ``meltemi.raytpu`` sets it):
    ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``. Returns whether it joined.

    Call it before anything asks JAX for its devices.
    """
    if not all(os.environ.get(name) for name in ENVIRONMENT) or int(os.environ["JAX_NUM_PROCESSES"]) < 2:
        return False
    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
    )
    if jax.default_backend() == "cpu":  # gloo carries the collectives and announces every connection
        drop_gloo_lines()
    connect_collectives()
    return True


def connect_collectives() -> None:
    """Run one collective over every device now, while the processes are together.

    On CPU, the processes of a job exchange data through gloo, which connects them at their first
    collective over a group of devices and gives up if one process arrives more than 30 s after another
    (``GetKeyValue() timed out``; XLA's ``--xla_cpu_collective_timeout_seconds`` does not reach that
    step). Later collectives over a connected group wait as long as they need. ``jax.distributed.initialize``
    returns on every process at once (it waits for all of them), so connecting here means that a process
    compiling for longer than another (one found the program in the compilation cache, one did not) or
    starting later under load meets the others in a collective that waits, not in one that gives up.
    """
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("meltemi: every process joined")


def wait_for_every_process(reason: str) -> None:
    """Return once every process has called this with the same ``reason`` (at once with one process).

    Call it between compiling a program and running it: a collective first used over a new group of
    devices gives up when the processes reach it over 30 s apart (see ``connect_collectives``), and
    compiling (or loading a compiled program from the cache) takes each process a different time.
    """
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"meltemi: {reason}")


def agree(flags: Sequence[bool]) -> list[bool]:
    """For each flag, whether any process raised it (the same answer on every process)."""
    if jax.process_count() == 1:
        return [bool(f) for f in flags]
    gathered = multihost_utils.process_allgather(np.array([bool(f) for f in flags], np.int32))
    return [bool(v) for v in np.asarray(gathered).reshape(jax.process_count(), -1).any(axis=0)]


def gather_rows(row: np.ndarray) -> np.ndarray:
    """Every process's ``row`` (a 1-D array of one length everywhere), stacked in process order.

    >>> gather_rows(np.array([1, 2], np.uint32)).tolist()
    [[1, 2]]
    """
    if jax.process_count() == 1:
        return row[None]
    return np.asarray(multihost_utils.process_allgather(row)).reshape(jax.process_count(), -1)


def row_hashes(rows: np.ndarray) -> np.ndarray:
    """An 8-byte digest per row, as ``(rows, 2)`` uint32 (JAX gathers 64-bit integers only with x64 on)."""
    digests = [hashlib.blake2b(np.ascontiguousarray(r).tobytes(), digest_size=8).digest() for r in rows]
    return np.frombuffer(b"".join(digests), np.uint32).reshape(len(rows), 2)


def global_batch_hash(local_inputs: np.ndarray) -> str:
    """A hash of the whole global batch in row order, whatever the number of processes that read it."""
    mine = row_hashes(local_inputs)
    every = (
        np.asarray(multihost_utils.process_allgather(mine)).reshape(-1) if jax.process_count() > 1 else mine
    )
    return hashlib.sha256(every.tobytes()).hexdigest()[:16]


def batch_hash(local: dict) -> str:
    """The hash of the global batch this process holds ``local`` of (``global_batch_hash`` of
    its inputs and targets): what ``batches.jsonl`` and a checkpoint's data position record."""
    return global_batch_hash(np.concatenate([local["input_ids"], local["targets"]], axis=1))
