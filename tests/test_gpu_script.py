"""``benchmarks/gpu.py``, the one call a GPU session makes, checked where device time costs nothing: its
default parts fit the 8 minutes the call is given, and every Mosaic GPU setting it times compiles for a GPU
(lowering checks the kernels' shared memory against a Hopper SM's)."""

import functools
import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from meltemi.kernels import MaskSpec
from meltemi.kernels.attention_mosaic import mosaic_attention

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@functools.cache
def script(name: str):
    """A benchmark script as a module (``benchmarks/`` is not a package), registered under a name of its own
    as dataclasses need."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gpu = script("gpu")


def test_the_default_parts_are_estimated_to_fit_the_eight_minute_call():
    parts = [part for part in gpu.plan(smoke=False, fp8_steps=100, torch_microbatch=None) if part.default]
    assert {"trainer-shipped", "torch", "trainer-mosaic", "gpu-tests"} <= {part.name for part in parts}
    assert sum(part.estimate_s for part in parts) <= 8 * 60


@pytest.mark.parametrize("setting", gpu.MOSAIC_SWEEP)
def test_every_mosaic_setting_the_call_times_compiles_for_a_gpu_at_the_1b_shapes(setting):
    config = script("kernels_attention").mosaic_blocks(setting)
    q = jax.ShapeDtypeStruct((1, 4096, 32, 64), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 4096, 8, 64), jnp.bfloat16)
    segment_ids = jax.ShapeDtypeStruct((1, 4096), jnp.int32)
    spec = MaskSpec(causal=True, sliding_window=None, softmax_scale=0.125)

    def loss(q, k, v, segment_ids):
        return jnp.sum(mosaic_attention(q, k, v, segment_ids, spec, config).astype(jnp.float32))

    traced = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, kv, kv, segment_ids)
    assert traced.lower(lowering_platforms=("cuda",)).as_text().count("@mosaic_gpu") == 3
