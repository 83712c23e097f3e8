"""Attention behaviour by example: masking edge cases, bad input, dispatch, memory, GPU lowering."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from meltemi.kernels import MaskSpec, PallasAttentionConfig, attention, choose_attention_implementation
from meltemi.kernels.attention_pallas import pallas_attention

COMPUTED = ("reference", "xla", "pallas")


def qkv(batch=1, seq=8, heads=2, kv_heads=1, head_dim=16, dtype=jnp.float32, seed=0):
    """Drawn with numpy: eagerly, jax.random compiles one program per random operation and shape."""
    rng = np.random.default_rng(seed)
    shapes = (batch, seq, heads, head_dim), (batch, seq, kv_heads, head_dim), (batch, seq, kv_heads, head_dim)
    return jax.device_put(tuple(rng.standard_normal(shape, np.float32).astype(dtype) for shape in shapes))


@pytest.mark.parametrize("implementation", COMPUTED)
def test_fully_masked_rows_give_zero_output_and_gradient(implementation):
    q, k, v = qkv(seq=6)
    segment_ids = jnp.array([[0, 0, 1, -1, -1, 1]])

    def loss(q, k, v):
        out = attention(q, k, v, segment_ids=segment_ids, implementation=implementation)
        return jnp.sum(out**2), out

    # Jitted for speed: eagerly, every operation compiled a program of its own.
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)
    assert np.all(np.isfinite(out)) and all(np.all(np.isfinite(g)) for g in grads)
    np.testing.assert_array_equal(out[0, 3:5], 0.0)
    np.testing.assert_array_equal(grads[0][0, 3:5], 0.0)
    np.testing.assert_array_equal(grads[1][0, 3:5], 0.0)
    assert np.all(np.abs(out[0, :3]) > 0)


@pytest.mark.parametrize("implementation", COMPUTED)
def test_segments_keep_documents_apart(implementation):
    """Changing one document's keys must not change another document's outputs."""
    q, k, v = qkv(seq=8)
    segment_ids = jnp.array([[0, 0, 0, 1, 1, 1, 1, 1]])
    # Jitted for speed: eagerly, every operation compiled a program of its own.
    run = jax.jit(
        lambda k: attention(q, k, v, segment_ids=segment_ids, causal=False, implementation=implementation)
    )
    before = run(k)
    after = run(k.at[:, 3:].add(5.0))
    np.testing.assert_array_equal(before[:, :3], after[:, :3])
    assert not np.allclose(before[:, 3:], after[:, 3:])


@pytest.mark.parametrize("bad", [jnp.nan, jnp.inf, -jnp.inf])
@pytest.mark.parametrize("argument", ["q", "k", "v"])
def test_non_finite_inputs_are_reported_by_name(bad, argument):
    inputs = dict(zip("qkv", qkv(), strict=True))
    inputs[argument] = inputs[argument].at[0, 1, 0, 2].set(bad)
    with pytest.raises(FloatingPointError, match=f"attention: NaN or infinite values in {argument}$"):
        attention(inputs["q"], inputs["k"], inputs["v"], implementation="xla")


def test_non_finite_inputs_fail_inside_jit_with_the_documented_error():
    """What the README promises a jitted caller: a JaxRuntimeError whose message names the argument."""
    q, k, v = qkv()
    run = jax.jit(lambda q, k, v: attention(q, k, v, implementation="xla"))
    run(q, k, v).block_until_ready()
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        run(q, k, v.at[0, 0, 0, 0].set(jnp.nan)).block_until_ready()
    last_line = str(caught.value).rstrip().splitlines()[-1]
    assert last_line == "NonFiniteError: attention: NaN or infinite values in v"


@pytest.mark.parametrize("other", ["k", "v"])
def test_q_k_and_v_must_share_a_dtype(other):
    inputs = dict(zip("qkv", qkv(), strict=True))
    inputs[other] = inputs[other].astype(jnp.bfloat16)
    with pytest.raises(ValueError, match="attention: q, k, v must share a dtype"):
        attention(**inputs)


def test_mask_spec_is_public_and_checks_its_fields():
    import meltemi.kernels

    assert "MaskSpec" in meltemi.kernels.__all__
    with pytest.raises(ValueError, match="MaskSpec: softmax_scale must be a positive finite number"):
        MaskSpec(causal=True, sliding_window=None, softmax_scale=float("nan"))
    with pytest.raises(ValueError, match="MaskSpec: sliding_window must be a positive int or None"):
        MaskSpec(causal=False, sliding_window=-3, softmax_scale=1.0)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(q=jnp.ones((8, 2, 16))), "q must be \\[batch, seq, heads, head_dim\\]"),
        (dict(k=jnp.ones((1, 8, 3, 16)), v=jnp.ones((1, 8, 3, 16))), "must divide q heads"),
        (dict(v=jnp.ones((1, 8, 1, 8))), "k and v must have the same shape"),
        (dict(k=jnp.ones((1, 7, 1, 16)), v=jnp.ones((1, 7, 1, 16))), "must match q shape"),
        (dict(q=jnp.ones((1, 8, 2, 16), jnp.int32)), "q must be a floating-point array"),
        (dict(k=jnp.ones((1, 8, 1, 16), jnp.bfloat16)), "must share a dtype"),
        (dict(segment_ids=jnp.zeros((1, 7), jnp.int32)), "segment_ids must be \\[batch, seq\\]"),
        (dict(segment_ids=jnp.zeros((1, 8))), "segment_ids must be integers"),
        (dict(sliding_window=0), "sliding_window must be a positive int"),
        (dict(sliding_window=2.5), "sliding_window must be a positive int"),
        (dict(softmax_scale=-1.0), "softmax_scale must be a positive finite number"),
        (dict(implementation="flash"), "implementation must be one of"),
    ],
)
def test_bad_arguments_get_clear_errors(change, message):
    q, k, v = qkv()
    arguments = dict(q=q, k=k, v=v) | change
    with pytest.raises(ValueError, match=f"attention: .*{message}"):
        attention(**arguments)


def test_pallas_config_rejects_settings_triton_cannot_use():
    with pytest.raises(ValueError, match="PallasAttentionConfig: block_q must be a power of two >= 16"):
        PallasAttentionConfig(block_q=48)
    with pytest.raises(ValueError, match="num_stages must be a positive int or None, got 0"):
        PallasAttentionConfig(num_stages=0)


def test_auto_choice_is_inspectable_per_platform():
    bf16 = jnp.zeros((1, 8, 2, 64), jnp.bfloat16)
    assert choose_attention_implementation(bf16, platform="gpu").implementation == "cudnn"
    assert choose_attention_implementation(bf16, platform="tpu").implementation == "splash"
    assert choose_attention_implementation(bf16, platform="cpu").implementation == "xla"
    fallback = choose_attention_implementation(bf16, jnp.zeros((1, 8), jnp.int32), platform="gpu")
    assert fallback.implementation == "pallas" and "segment_ids" in fallback.reason
    wide = jnp.zeros((1, 8, 2, 256), jnp.bfloat16)
    assert "head_dim" in choose_attention_implementation(wide, platform="gpu").reason
    two_sided = choose_attention_implementation(bf16, causal=False, sliding_window=4, platform="gpu")
    assert two_sided.implementation == "pallas" and "sliding window" in two_sided.reason
    one_sided = choose_attention_implementation(bf16, causal=True, sliding_window=4, platform="gpu")
    assert one_sided.implementation == "cudnn"
    rocm = choose_attention_implementation(bf16, platform="rocm")
    assert rocm.implementation == "xla" and "ROCm" in rocm.reason


@pytest.mark.parametrize(("version", "expected"), [("rocm 6.2.4", "xla"), ("cuda 12.8", "cudnn")])
def test_auto_tells_an_amd_gpu_from_an_nvidia_one(monkeypatch, version, expected):
    from types import SimpleNamespace

    import jax

    gpu = SimpleNamespace(client=SimpleNamespace(platform_version=version))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda *_: [gpu])
    bf16 = jnp.zeros((1, 8, 2, 64), jnp.bfloat16)
    assert choose_attention_implementation(bf16).implementation == expected


def test_auto_logs_its_choice_and_runs_it(caplog):
    q, k, v = qkv()
    with caplog.at_level(logging.DEBUG, logger="meltemi.kernels.attention"):
        out = attention(q, k, v)
    choice = choose_attention_implementation(q)
    assert f"using {choice.implementation}" in caplog.text
    np.testing.assert_allclose(out, attention(q, k, v, implementation=choice.implementation), rtol=1e-6)


def test_explicit_cudnn_with_unsupported_arguments_says_why():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="cudnn.*bfloat16 or float16"):
        attention(q, k, v, implementation="cudnn")


@pytest.mark.parametrize("causal, window", [(True, None), (True, 3), (False, None)])
def test_cudnn_wrapper_translates_masks_exactly(causal, window):
    """The wrapper's argument mapping, checked through the same JAX call with its XLA backend."""
    from meltemi.kernels.attention_cudnn import cudnn_attention

    q, k, v = qkv(seq=10, heads=4, kv_heads=2)
    spec = MaskSpec(causal, window, 0.3)

    @jax.jit  # for speed: eagerly, every operation compiled a program of its own
    def both():
        expected = attention(
            q, k, v, causal=causal, sliding_window=window, softmax_scale=0.3, implementation="xla"
        )
        return cudnn_attention(q, k, v, spec, implementation="xla"), expected

    np.testing.assert_allclose(*both(), atol=2e-6)


def test_blockwise_memory_stays_linear_in_sequence():
    """Forward+backward of "xla" must not allocate anything like the [seq, seq] scores the oracle needs."""
    seq = 2048
    q = jax.ShapeDtypeStruct((1, seq, 1, 16), jnp.float32)

    def temp_bytes(implementation):
        def loss(q, k, v):
            return attention(q, k, v, implementation=implementation, check_finite=False).sum()

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, q, q).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    scores_bytes = seq * seq * 4
    assert temp_bytes("reference") >= scores_bytes
    assert temp_bytes("xla") < scores_bytes / 4


def test_pallas_kernels_lower_to_triton_for_cuda():
    """Forward and both backward kernels lower for a CUDA GPU from this machine (no GPU needed)."""
    config = PallasAttentionConfig(interpret=False)
    q = jax.ShapeDtypeStruct((1, 200, 8, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 200, 2, 128), jnp.bfloat16)
    segment_ids = jax.ShapeDtypeStruct((1, 200), jnp.int32)

    def loss(q, k, v, segment_ids):
        out = pallas_attention(q, k, v, segment_ids, MaskSpec(True, 64, 0.1), config)
        return out.astype(jnp.float32).sum()

    lowered = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).trace(q, kv, kv, segment_ids)
    text = lowered.lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("xla.gpu.triton") == 3


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["pallas", "mosaic", "cudnn", "xla"])
def test_gpu_implementations_match_reference(implementation):
    q, k, v = qkv(batch=2, seq=1000, heads=8, kv_heads=2, head_dim=128, dtype=jnp.bfloat16)
    d_out = jax.random.normal(jax.random.PRNGKey(9), q.shape, q.dtype)

    def outputs(name):
        out, vjp = jax.vjp(lambda *a: attention(*a, sliding_window=300, implementation=name), q, k, v)
        return (out, *vjp(d_out))

    for want, got in zip(outputs("reference"), outputs(implementation), strict=True):
        want, got = np.asarray(want, np.float32), np.asarray(got, np.float32)
        assert np.max(np.abs(got - want)) <= 2e-2 * np.max(np.abs(want))
