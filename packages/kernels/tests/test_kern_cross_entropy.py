"""Fused cross-entropy equals the full-logits oracle, never builds the logits, and rejects bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.kernels import PallasCrossEntropyConfig, choose_cross_entropy_implementation, cross_entropy
from meltemi.kernels._cross_entropy_args import token_weights
from meltemi.kernels.cross_entropy_pallas import pallas_cross_entropy

TOLERANCE = {jnp.dtype(jnp.float32): 1e-5, jnp.dtype(jnp.bfloat16): 2e-2}


def make_inputs(tokens, embed, vocab, dtype, seed, masked_fraction=0.3):
    """Drawn with numpy and put on the device as they are: eagerly, jax.random (or a conversion by
    jnp.asarray) compiles one program per operation and shape."""
    rng = np.random.default_rng(seed)
    hidden = rng.standard_normal((tokens, embed), np.float32).astype(dtype)
    unembedding = (rng.standard_normal((embed, vocab), np.float32) / np.sqrt(embed)).astype(dtype)
    labels = rng.integers(0, vocab, tokens, np.int32)
    mask = rng.uniform(size=tokens) >= masked_fraction
    d_lse = rng.standard_normal(tokens, np.float32)
    return jax.device_put((hidden, unembedding, labels, mask, d_lse))


def values_and_gradients(implementation, inputs, z_loss_weight, block_size):
    hidden, unembedding, labels, mask, d_lse = inputs

    def f(h, w):
        return cross_entropy(
            h,
            w,
            labels,
            mask=mask,
            z_loss_weight=z_loss_weight,
            block_size=block_size,
            implementation=implementation,
            check_finite=False,
        )

    (loss, lse), vjp = jax.vjp(f, hidden, unembedding)
    return (loss, lse, *vjp((jnp.float32(1.7), d_lse)))


def assert_matches_reference(implementation, problem):
    tokens, embed, vocab, dtype, z_loss_weight, block_size, seed = problem
    # Both in one program, for speed: one compilation per example, not one per side.
    expected, actual = jax.jit(
        lambda inputs: [
            values_and_gradients(name, inputs, z_loss_weight, block_size)
            for name in ("reference", implementation)
        ]
    )(make_inputs(tokens, embed, vocab, dtype, seed))
    tolerance = TOLERANCE[jnp.dtype(dtype)]
    for name, want, got in zip(("loss", "lse", "d_hidden", "d_unembedding"), expected, actual, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        want, got = np.asarray(want, np.float32), np.asarray(got, np.float32)
        scale = max(float(np.max(np.abs(want))), 1.0)
        error = float(np.max(np.abs(got - want)))
        assert error <= tolerance * scale, f"{name}: max error {error:.3g} vs scale {scale:.3g}"


problems = st.tuples(
    st.integers(1, 40),  # tokens
    st.integers(1, 24),  # embed
    st.integers(1, 300),  # vocab
    st.sampled_from([jnp.float32, jnp.bfloat16]),
    st.sampled_from([0.0, 1e-3]),
    st.integers(1, 128),  # block size
    st.integers(0, 2**31 - 1),
)


@settings(max_examples=4)
@given(problems)
def test_blockwise_xla_matches_reference(problem):
    assert_matches_reference("xla", problem)


@settings(max_examples=2)
@given(problems)
def test_pallas_interpreted_matches_reference(problem):
    assert_matches_reference("pallas", problem)


def test_pallas_chunks_that_overlap_at_the_vocabulary_end():
    """Vocab 100 in chunks of 48 (tiles of 16): the last chunk re-covers columns, counted only once."""
    hidden, unembedding, labels, mask, d_lse = make_inputs(19, 20, 100, jnp.float32, seed=5)
    labels = labels.at[0].set(99).at[1].set(60).at[2].set(47)
    config = PallasCrossEntropyConfig(block_tokens=16, block_vocab=16, block_embed=16)
    weights = token_weights(mask, 19)

    def run(function):
        out, vjp = jax.vjp(function, hidden, unembedding)
        return (*out, *vjp((jnp.float32(1.0), d_lse)))

    from meltemi.kernels.cross_entropy_reference import reference_cross_entropy

    @jax.jit  # for speed: eagerly, every operation compiled a program of its own
    def both():
        want = run(lambda h, w: reference_cross_entropy(h, w, labels, weights, 1e-3))
        got = run(
            lambda h, w: pallas_cross_entropy(h, w, labels, weights, 1e-3, block_size=48, config=config)
        )
        return want, got

    want, got = both()
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(a))))


@pytest.mark.parametrize("implementation", ["reference", "xla", "pallas"])
def test_fully_masked_batch_gives_zero_loss_and_zero_gradient(implementation):
    hidden, unembedding, labels, _, _ = make_inputs(5, 8, 30, jnp.float32, seed=1)
    mask = jnp.zeros((5,), bool)

    def loss(h, w):
        return cross_entropy(h, w, labels, mask=mask, block_size=16, implementation=implementation)[0]

    # Jitted for speed: eagerly, every operation compiled a program of its own.
    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(hidden, unembedding)
    assert float(value) == 0.0
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)


def test_mask_weights_the_mean():
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=2)

    @jax.jit  # for speed: eagerly, every operation compiled a program of its own
    def loss_and_expected():
        _, lse = cross_entropy(hidden, unembedding, labels, implementation="reference")
        logits = hidden @ unembedding
        per_token = lse - logits[jnp.arange(4), labels]
        loss, _ = cross_entropy(hidden, unembedding, labels, mask=jnp.array([1, 0, 1, 0]), block_size=7)
        return loss, (per_token[0] + per_token[2]) / 2

    loss, expected = loss_and_expected()
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_non_finite_hidden_is_reported():
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=3)
    with pytest.raises(FloatingPointError, match="cross_entropy: NaN or infinite values in hidden$"):
        cross_entropy(hidden.at[1, 1].set(jnp.nan), unembedding, labels)


@pytest.mark.parametrize("bad_label", [-1, 30])
def test_labels_outside_the_vocabulary_are_reported_by_position_and_value(bad_label):
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=4)
    labels = labels.at[2].set(bad_label).at[3].set(99)
    with pytest.raises(ValueError, match=f"labels must lie in \\[0, 30\\); labels\\[2\\] is {bad_label} "):
        cross_entropy(hidden, unembedding, labels)


def test_labels_outside_the_vocabulary_are_reported_by_position_and_value_inside_jit():
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=4)
    run = jax.jit(lambda labels: cross_entropy(hidden, unembedding, labels)[0])
    run(labels).block_until_ready()
    expected = "LabelOutOfRangeError: cross_entropy: labels must lie in \\[0, 30\\); labels\\[1\\] is 31 "
    with pytest.raises(jax.errors.JaxRuntimeError, match=expected):
        run(labels.at[1].set(31).at[3].set(-5)).block_until_ready()


def test_non_finite_hidden_inside_jit_fails_with_the_documented_error():
    """What the README promises a jitted caller: a JaxRuntimeError whose message names the argument."""
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=3)
    run = jax.jit(lambda hidden: cross_entropy(hidden, unembedding, labels)[0])
    with pytest.raises(jax.errors.JaxRuntimeError) as caught:
        run(hidden.at[1, 1].set(jnp.inf)).block_until_ready()
    last_line = str(caught.value).rstrip().splitlines()[-1]
    assert last_line == "NonFiniteError: cross_entropy: NaN or infinite values in hidden"


@pytest.mark.parametrize("implementation", ["reference", "xla", "pallas"])
def test_hidden_and_unembedding_must_share_a_dtype(implementation):
    hidden, unembedding, labels, _, _ = make_inputs(4, 8, 30, jnp.float32, seed=5)
    message = "hidden and unembedding must share a dtype, got bfloat16 and float32"
    with pytest.raises(ValueError, match=message):
        cross_entropy(hidden.astype(jnp.bfloat16), unembedding, labels, implementation=implementation)
    # Jitted for speed: eagerly, every operation compiled a program of its own.
    loss, _ = jax.jit(lambda h, w: cross_entropy(h, w, labels, implementation=implementation))(
        hidden.astype(jnp.bfloat16), unembedding.astype(jnp.bfloat16)
    )
    assert loss.dtype == jnp.float32


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(hidden=jnp.ones((4, 8, 1))), "hidden must be \\[tokens, embed\\]"),
        (dict(unembedding=jnp.ones((9, 30))), "unembedding's embed axis \\(9\\) must match hidden's \\(8\\)"),
        (dict(labels=jnp.zeros((5,), jnp.int32)), "labels must be \\[tokens\\]"),
        (dict(labels=jnp.zeros((4,))), "labels must be integers"),
        (dict(mask=jnp.ones((3,), bool)), "mask must be \\[tokens\\]"),
        (dict(z_loss_weight=-1.0), "z_loss_weight must be a finite number >= 0"),
        (dict(block_size=0), "block_size must be a positive int"),
        (dict(implementation="triton"), "implementation must be one of"),
        (dict(hidden=jnp.ones((4, 8), jnp.int32)), "hidden must be a floating-point array"),
    ],
)
def test_bad_arguments_get_clear_errors(change, message):
    arguments = dict(
        hidden=jnp.ones((4, 8)), unembedding=jnp.ones((8, 30)), labels=jnp.zeros((4,), jnp.int32)
    )
    with pytest.raises(ValueError, match=f"cross_entropy: .*{message}"):
        cross_entropy(**(arguments | change))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(block_vocab=48), "block_vocab must be a power of two >= 16, got 48"),
        (dict(block_embed=8), "block_embed must be a power of two >= 16, got 8"),
        (dict(num_stages=0), "num_stages must be a positive int or None, got 0"),
        (dict(num_warps=3), "num_warps must be a power of two >= 1 or None, got 3"),
    ],
)
def test_pallas_config_rejects_settings_triton_cannot_use(settings, message):
    with pytest.raises(ValueError, match=f"PallasCrossEntropyConfig: {message}"):
        PallasCrossEntropyConfig(**settings)


def test_auto_choice_is_inspectable():
    for platform in ("cpu", "gpu", "tpu"):
        choice = choose_cross_entropy_implementation(platform)
        assert choice.implementation in ("xla", "pallas") and choice.reason


def test_fused_versions_never_allocate_the_logits():
    """Compiled forward+backward temp memory stays far below one [tokens, vocab] float32 buffer."""
    tokens, embed, vocab = 1024, 32, 16384
    shapes = (
        jax.ShapeDtypeStruct((tokens, embed), jnp.float32),
        jax.ShapeDtypeStruct((embed, vocab), jnp.float32),
        jax.ShapeDtypeStruct((tokens,), jnp.int32),
    )

    def temp_bytes(implementation):
        def loss(h, w, y):
            return cross_entropy(h, w, y, block_size=1024, implementation=implementation, check_finite=False)[
                0
            ]

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*shapes).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    logits_bytes = tokens * vocab * 4
    assert temp_bytes("reference") >= logits_bytes
    assert temp_bytes("xla") < logits_bytes / 4
    assert temp_bytes("pallas") < logits_bytes / 4


def test_blockwise_xla_never_copies_a_bfloat16_unembedding_whole():
    """Compiled bfloat16 forward+backward temp memory stays below one bfloat16 copy of the unembedding.

    XLA's CPU backend has no bfloat16 slicing: unless the blockwise code prevents it, it converts the whole
    unembedding to float32 once, outside the loop, and keeps a second gradient buffer (50 MiB here).
    """
    tokens, embed, vocab = 1024, 256, 32768
    shapes = (
        jax.ShapeDtypeStruct((tokens, embed), jnp.bfloat16),
        jax.ShapeDtypeStruct((embed, vocab), jnp.bfloat16),
        jax.ShapeDtypeStruct((tokens,), jnp.int32),
    )

    def loss(h, w, y):
        return cross_entropy(h, w, y, block_size=1024, implementation="xla", check_finite=False)[0]

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*shapes).compile()
    assert compiled.memory_analysis().temp_size_in_bytes < embed * vocab * 2


def test_pallas_kernels_lower_to_triton_for_cuda():
    config = PallasCrossEntropyConfig(interpret=False)
    shapes = (
        jax.ShapeDtypeStruct((1000, 256), jnp.bfloat16),
        jax.ShapeDtypeStruct((256, 5000), jnp.bfloat16),
        jax.ShapeDtypeStruct((1000,), jnp.int32),
        jax.ShapeDtypeStruct((1000,), jnp.float32),
    )

    def loss(h, w, y, weights):
        return pallas_cross_entropy(h, w, y, weights, 1e-4, block_size=2048, config=config)[0]

    text = (
        jax.jit(jax.grad(loss, argnums=(0, 1))).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()
    )
    assert text.count("xla.gpu.triton") == 2


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["xla", "pallas"])
def test_gpu_cross_entropy_matches_reference(implementation):
    assert_matches_reference(implementation, (512, 256, 10000, jnp.bfloat16, 1e-4, 2048, 6))


def test_with_both_checks_off_a_jitted_loss_holds_no_host_callback():
    hidden, unembedding, labels = jnp.ones((8, 4)), jnp.ones((4, 16)), jnp.arange(8)

    def lowered(**checks):
        loss = jax.jit(
            lambda h, w, y: cross_entropy(h, w, y, block_size=8, implementation="xla", **checks)[0]
        )
        return loss.lower(hidden, unembedding, labels).as_text()

    assert "callback" in lowered()
    assert "callback" in lowered(check_finite=False)  # the label check is still there
    assert "callback" not in lowered(check_finite=False, check_labels=False)


def test_the_label_check_off_skips_even_an_eager_bad_label():
    hidden, unembedding = jnp.ones((2, 4)), jnp.ones((4, 16))
    with pytest.raises(ValueError, match=r"labels\[1\] is 99"):
        cross_entropy(hidden, unembedding, jnp.array([0, 99]), block_size=8)
    loss, _ = cross_entropy(hidden, unembedding, jnp.array([0, 99]), block_size=8, check_labels=False)
    assert loss.shape == ()
