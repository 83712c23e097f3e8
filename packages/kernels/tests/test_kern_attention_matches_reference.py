"""Every attention implementation equals the float32 oracle, outputs and gradients, over random arguments.

Tolerances are relative to the largest reference magnitude (at least 1: inputs are unit normal, and a
gradient that is exactly zero in the oracle may carry rounding noise): 1e-5 in float32, 2e-2 in bfloat16.
Pallas kernels run interpreted on CPU, so their shapes stay tiny and their examples few.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.kernels import MaskSpec, PallasAttentionConfig, attention
from meltemi.kernels.attention_pallas import pallas_attention
from meltemi.kernels.attention_reference import reference_attention
from meltemi.kernels.attention_xla import xla_attention

TOLERANCE = {jnp.dtype(jnp.float32): 1e-5, jnp.dtype(jnp.bfloat16): 2e-2}


@st.composite
def attention_problems(draw, max_seq=24, head_dims=(4, 8, 16)):
    batch = draw(st.integers(1, 2))
    seq = draw(st.integers(1, max_seq))
    kv_heads = draw(st.integers(1, 2))
    group = draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from(head_dims))
    dtype = draw(st.sampled_from([jnp.float32, jnp.bfloat16]))
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), st.integers(1, seq + 2)))
    layout = draw(st.sampled_from(["none", "documents", "documents+padding", "scattered"]))
    seed = draw(st.integers(0, 2**31 - 1))
    return dict(
        shape=(batch, seq, kv_heads, group, head_dim),
        dtype=dtype,
        causal=causal,
        window=window,
        layout=layout,
        seed=seed,
    )


def make_inputs(problem):
    """Unit-normal q, k, v and output cotangent, drawn with numpy and put on the device as they are:
    eagerly, jax.random (or a conversion by jnp.asarray) compiles one program per operation and shape,
    which took half of each example's CPU time."""
    batch, seq, kv_heads, group, head_dim = problem["shape"]
    rng = np.random.default_rng(problem["seed"])
    segment_ids = None
    if problem["layout"] == "scattered":
        segment_ids = rng.integers(-1, 3, size=(batch, seq)).astype(np.int32)
    elif "documents" in problem["layout"]:
        starts = rng.random((batch, seq)) < (0.05 if problem["layout"].startswith("long") else 0.5)
        segment_ids = np.cumsum(starts, axis=1)
        if problem["layout"].endswith("padding"):
            tail = rng.integers(0, seq + 1, size=batch)
            segment_ids[np.arange(seq)[None, :] >= (seq - tail)[:, None]] = -1
        segment_ids = segment_ids.astype(np.int32)
    q_shape, kv_shape = (batch, seq, kv_heads * group, head_dim), (batch, seq, kv_heads, head_dim)
    q, k, v, d_out = (
        rng.standard_normal(shape, np.float32).astype(problem["dtype"])
        for shape in (q_shape, kv_shape, kv_shape, q_shape)
    )
    return jax.device_put((q, k, v, segment_ids, d_out))


def outputs_and_gradients(implementation, problem, q, k, v, segment_ids, d_out):
    f = functools.partial(
        attention,
        causal=problem["causal"],
        segment_ids=segment_ids,
        sliding_window=problem["window"],
        implementation=implementation,
        check_finite=False,
    )
    out, vjp = jax.vjp(f, q, k, v)
    return (out, *vjp(d_out))


def assert_matches_reference(implementation, problem):
    # Both in one program, for speed: one compilation per example, not one per side.
    expected, actual = jax.jit(
        lambda *inputs: [
            outputs_and_gradients(name, problem, *inputs) for name in ("reference", implementation)
        ]
    )(*make_inputs(problem))
    tolerance = TOLERANCE[jnp.dtype(problem["dtype"])]
    for name, want, got in zip(("out", "dq", "dk", "dv"), expected, actual, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        want, got = np.asarray(want, np.float32), np.asarray(got, np.float32)
        assert np.all(np.isfinite(got)), f"{name} has non-finite values"
        scale = max(float(np.max(np.abs(want))), 1.0)
        error = float(np.max(np.abs(got - want)))
        assert error <= tolerance * scale, f"{name}: max error {error:.3g} vs scale {scale:.3g}"


@settings(max_examples=4)
@given(attention_problems())
def test_xla_blockwise_matches_reference(problem):
    assert_matches_reference("xla", problem)


@settings(max_examples=3)
@given(attention_problems(max_seq=20, head_dims=(8, 16)))
def test_pallas_interpreted_matches_reference(problem):
    assert_matches_reference("pallas", problem)


def test_splash_interpreted_matches_reference():
    """One rich case (interpreting the TPU kernel is slow): GQA, ragged length, documents and padding."""
    problem = dict(
        shape=(2, 19, 2, 2, 8),
        dtype=jnp.float32,
        causal=True,
        window=None,
        layout="documents+padding",
        seed=7,
    )
    assert_matches_reference("splash", problem)


@functools.partial(jax.jit, static_argnames=("implementation", "window"))
def blocked_and_reference(q, k, v, segment_ids, d_out, *, implementation, window):
    """Outputs and gradients of the reference and of the blocked version in small tiles. One program per
    version, window and segment layout (``None`` or ids), with the arrays as arguments: the parameters that
    share a version and window share its programs, lowered once (the Pallas kernels' lowering is most of
    their time)."""
    spec = MaskSpec(causal=True, sliding_window=window, softmax_scale=0.25)
    if implementation == "xla":
        blocked = functools.partial(xla_attention, block_size=16)
    else:
        config = PallasAttentionConfig(block_q=16, block_k=32, backward_block_q=32, backward_block_k=16)
        blocked = functools.partial(pallas_attention, config=config)
    results = []
    for function in (reference_attention, blocked):
        out, vjp = jax.vjp(functools.partial(function, segment_ids=segment_ids, spec=spec), q, k, v)
        results.append((out, *vjp(d_out)))
    return results


@pytest.mark.parametrize(
    ("implementation", "layout", "window"),
    [("xla", "documents", 29), ("pallas", "documents", 29), ("pallas", "long documents+padding", None),
     ("pallas", "scattered", None)],
)  # fmt: skip
def test_blockwise_versions_cross_many_blocks(implementation, layout, window):
    """Small tiles over a longer sequence exercise the online softmax and the block skipping of each loop:
    by position (causal, window) and by document (short ones, a few long ones and padding, scattered ids)."""
    q, k, v, segment_ids, d_out = make_inputs(
        dict(shape=(2, 75, 1, 2, 16), dtype=jnp.float32, causal=True, window=None, layout=layout, seed=3)
    )
    for segments in (None, segment_ids):
        expected, actual = blocked_and_reference(
            q, k, v, segments, d_out, implementation=implementation, window=window
        )
        for want, got in zip(expected, actual, strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(want)))))
