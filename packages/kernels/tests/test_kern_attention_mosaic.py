"""The Mosaic GPU kernels: their numbers in Mosaic GPU's interpreter, their lowering for a GPU.

A GPU is not needed for either. The interpreter runs the kernels' block loops, TMA copies and barriers on
the CPU (their matrix multiplies and register layouts take the interpreter's stand-ins, see
``attention_mosaic``); lowering for ``cuda`` builds the GPU version, which is where a wrong layout or an
operation Mosaic GPU lacks fails. Speed is measured on a GPU by ``benchmarks/gpu.py``.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import mosaic_gpu as plgpu

from meltemi.kernels import MaskSpec, attention
from meltemi.kernels.attention_mosaic import (
    MosaicAttentionConfig,
    mosaic_attention,
    mosaic_unsupported_reason,
)
from meltemi.kernels.attention_reference import reference_attention


def interpreter() -> object:
    """Mosaic GPU's interpreter parameters: exported as ``plgpu.InterpretGPUParams`` from JAX 0.11; JAX
    0.10, the newest for Python 3.11, keeps them private (the one import of JAX internals here, a test's)."""
    params = getattr(plgpu, "InterpretGPUParams", None)
    if params is None:
        from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams as params
    return params()


INTERPRETED = MosaicAttentionConfig(interpret=interpreter())
WIDE_TILES = MosaicAttentionConfig(128, 128, 128, 128, interpret=INTERPRETED.interpret)
DEEPER = MosaicAttentionConfig(stages=3, interpret=INTERPRETED.interpret)


def documents(lengths: list[int], padding: int = 0) -> np.ndarray:
    ids = [i for i, n in enumerate(lengths) for _ in range(n)] + [-1] * padding
    return np.asarray([ids], np.int32)


def inputs(seq: int, heads: int, kv_heads: int, head_dim: int, seed: int):
    rng = np.random.default_rng(seed)
    q_shape, kv_shape = (1, seq, heads, head_dim), (1, seq, kv_heads, head_dim)
    return [
        jnp.asarray(rng.standard_normal(shape, np.float32), jnp.bfloat16)
        for shape in (q_shape, kv_shape, kv_shape, q_shape)
    ]


@dataclasses.dataclass(frozen=True)
class Case:
    segments: int | np.ndarray  # a sequence length (no segment ids), or the ids of one row
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool = True
    window: int | None = None
    config: MosaicAttentionConfig = INTERPRETED


CASES = {
    "one document, ragged length": Case(200, 2, 1, 64),
    "many short documents and padding": Case(documents([3, 40, 1, 70, 17, 9], padding=52), 4, 2, 32),
    "long documents: blocks visible whole": Case(documents([190, 130]), 2, 2, 64),
    "not causal, sliding window": Case(documents([100, 92]), 2, 1, 64, causal=False, window=37),
    "128-row tiles, heads of 128, groups of 4": Case(
        documents([150, 100, 6], padding=30), 8, 2, 128, config=WIDE_TILES
    ),
    "three buffers a stream, groups of 4": Case(documents([60, 250, 20]), 4, 1, 64, config=DEEPER),
}


@pytest.mark.parametrize("case", CASES)
def test_interpreted_kernel_matches_reference(case):
    c = CASES[case]
    segments, config = c.segments, c.config
    seq = segments if isinstance(segments, int) else segments.shape[1]
    segment_ids = None if isinstance(segments, int) else jnp.asarray(segments)
    q, k, v, d_out = inputs(seq, c.heads, c.kv_heads, c.head_dim, seed=seq)
    spec = MaskSpec(causal=c.causal, sliding_window=c.window, softmax_scale=c.head_dim**-0.5)

    @jax.jit
    def outputs_and_gradients(q, k, v):
        results = []
        for run in (reference_attention, functools.partial(mosaic_attention, config=config)):
            out, vjp = jax.vjp(lambda q, k, v, run=run: run(q, k, v, segment_ids, spec), q, k, v)
            results.append((out, *vjp(d_out)))
        return results

    expected, actual = outputs_and_gradients(q, k, v)
    for name, want, got in zip(("out", "dq", "dk", "dv"), expected, actual, strict=True):
        want, got = np.asarray(want, np.float32), np.asarray(got, np.float32)
        assert np.all(np.isfinite(got)), name
        scale = max(float(np.max(np.abs(want))), 1.0)
        assert float(np.max(np.abs(got - want))) <= 2e-2 * scale, name
    if segment_ids is not None:  # padding attends to nothing: its output is zero
        assert not np.any(np.asarray(actual[0], np.float32)[np.asarray(segments) < 0])


def lowered_for_gpu(function, *shapes) -> str:
    """The StableHLO of ``function`` lowered for an NVIDIA GPU."""
    return jax.jit(function).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize(("causal", "window", "stages"), [(True, None, 2), (True, 1024, 3), (False, None, 2)])
def test_lowers_for_a_gpu_at_the_1b_step_shapes(causal, window, stages):
    """4,096-token rows of packed documents, 32 query and 8 key/value heads of 64, bfloat16: forward and
    backward are three Mosaic GPU kernels, and nothing runs on Triton."""
    q = jax.ShapeDtypeStruct((2, 4096, 32, 64), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((2, 4096, 8, 64), jnp.bfloat16)
    segment_ids = jax.ShapeDtypeStruct((2, 4096), jnp.int32)
    spec = MaskSpec(causal=causal, sliding_window=window, softmax_scale=0.125)

    def loss(q, k, v, segment_ids):
        config = MosaicAttentionConfig(stages=stages)
        return jnp.sum(mosaic_attention(q, k, v, segment_ids, spec, config).astype(jnp.float32))

    module = lowered_for_gpu(jax.grad(loss, argnums=(0, 1, 2)), q, kv, kv, segment_ids)
    assert module.count("@mosaic_gpu") == 3
    assert "xla.gpu.triton" not in module


def test_wide_heads_lower_for_a_gpu():
    q = jax.ShapeDtypeStruct((1, 512, 4, 128), jnp.float16)
    spec = MaskSpec(causal=True, sliding_window=None, softmax_scale=128**-0.5)
    assert "@mosaic_gpu" in lowered_for_gpu(lambda q: mosaic_attention(q, q, q, None, spec), q)


def test_refuses_what_it_cannot_run():
    x = jnp.ones((1, 64, 2, 64), jnp.float32)
    with pytest.raises(ValueError, match="implementation='mosaic'.*bfloat16 or float16, got float32"):
        attention(x, x, x, implementation="mosaic")
    bf16 = x.astype(jnp.bfloat16)
    with pytest.raises(
        ValueError, match="implementation='mosaic'.*NVIDIA GPU.*'cpu'; 'auto' picks.*interpret"
    ):
        attention(bf16, bf16, bf16, implementation="mosaic")
    hopper, ampere = ({"platform": "cuda", "compute_capability": c} for c in ("9.0", "8.0"))
    assert mosaic_unsupported_reason(bf16, **hopper) is None
    assert "Hopper GPUs" in mosaic_unsupported_reason(bf16, **ampere)
    with pytest.raises(ValueError, match="block_k must be a positive multiple of 64, got 48"):
        MosaicAttentionConfig(block_k=48)
    with pytest.raises(ValueError, match="stages must be an int >= 2, got 1"):
        MosaicAttentionConfig(stages=1)
