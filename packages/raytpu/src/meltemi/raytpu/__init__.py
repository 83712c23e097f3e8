"""meltemi.raytpu: run one JAX job across many preemptible accelerator slices on Ray.

JAX is not imported here: the workload that runs on the slices brings it.
"""

__version__ = "0.1.0"
