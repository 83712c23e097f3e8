"""Processes that reach their first collective far apart (one compiled for long, one loaded the program from
the compilation cache, or started late under load) still meet: gloo's 30 s connection deadline is spent while
they are together, when they join."""

import subprocess
import sys
import textwrap

import pytest

from meltemi.raytpu import free_listening_port
from meltemi.trainer.step.fake_devices import fake_devices_environ

pytestmark = pytest.mark.slow

# Each process joins, then the second arrives 35 s late (past gloo's 30 s) at a program whose collectives run
# over groups of devices no collective has used yet: pairs across the two processes.
LATE_PROCESS = textwrap.dedent(
    """
    import sys, time
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from meltemi.trainer.step.distributed import initialize_from_environment, wait_for_every_process

    assert initialize_from_environment()
    mesh = Mesh(np.array(jax.devices()).reshape(2, -1), ("data", "model"))
    local = np.full((1, 2), jax.process_index() + 1.0, np.float32)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data", "model")), local)
    total = jax.jit(lambda a: a.sum(axis=0), out_shardings=NamedSharding(mesh, P("model")))
    compiled = total.lower(x).compile()
    if jax.process_index() == 1:
        time.sleep(35)
    wait_for_every_process("compiled")
    print("sum", np.asarray(compiled(x).addressable_data(0)).tolist(), flush=True)
    """
)


def test_a_process_arriving_35_s_late_at_a_new_collective_is_waited_for(tmp_path):
    port = free_listening_port("127.0.0.1")
    processes = []
    for index in range(2):
        env = {**fake_devices_environ(2),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(index), "JAX_PLATFORMS": "cpu"}  # fmt: skip
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", LATE_PROCESS],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
        )
    for process in processes:
        out, err = process.communicate(timeout=150)
        assert process.returncode == 0, err[-3000:]
        assert "sum [3.0]" in out, out
