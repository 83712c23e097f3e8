"""meltemi.raytpu: run one JAX job across many preemptible accelerator slices on Ray.

JAX is not imported here: the workload that runs on the slices brings it.
"""

import importlib.metadata

from meltemi.raytpu.errors import (
    NotConnectedError,
    NotInJobError,
    RaytpuError,
    SliceJobError,
    SlicesUnavailableError,
)
from meltemi.raytpu.events import EventLog, StatusLine
from meltemi.raytpu.host_env import HostEnv, current_host
from meltemi.raytpu.inventory import Host, SliceInfo, discover_slices
from meltemi.raytpu.local_cluster import LocalSliceCluster
from meltemi.raytpu.outcomes import Attempt
from meltemi.raytpu.ports import free_listening_port
from meltemi.raytpu.runner import RetryPolicy, run_on_slices
from meltemi.raytpu.slices import TPU_GENERATIONS, SliceType, cpu_slice, gpu_slice, slice_type, tpu_slice

__version__ = importlib.metadata.version("meltemi-raytpu")

__all__ = [
    "TPU_GENERATIONS",
    "Attempt",
    "EventLog",
    "Host",
    "HostEnv",
    "LocalSliceCluster",
    "NotConnectedError",
    "NotInJobError",
    "RaytpuError",
    "RetryPolicy",
    "SliceInfo",
    "SliceJobError",
    "SliceType",
    "SlicesUnavailableError",
    "StatusLine",
    "cpu_slice",
    "current_host",
    "discover_slices",
    "free_listening_port",
    "gpu_slice",
    "run_on_slices",
    "slice_type",
    "tpu_slice",
]
