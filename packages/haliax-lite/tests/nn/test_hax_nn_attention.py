"""Named dot-product attention and masks equal their positional programs, grouped-query heads included."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite.nn import attention

Batch, KVHeads = hax.Axis("batch", 2), hax.Axis("kv_heads", 2)
QPerKV, HeadSize = hax.Axis("q_per_kv", 3), hax.Axis("head_size", 4)


def positional_attention(q, k, v, mask=None, bias=None, xp=jnp):
    """q: (b, s, kv, g, d); k, v: (b, t, kv, d); mask, bias: (s, t). ``xp``: numpy or jax.numpy."""
    scores = xp.einsum("bskgd,btkd->bkgst", q / np.sqrt(q.shape[-1]), k)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = xp.where(mask, scores, -1e9)
    weights = xp.exp(scores - scores.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)
    return xp.einsum("bkgst,btkd->bskgd", weights, v)


def raw_normal(rng, *axes):
    return rng.normal(size=[a.size for a in axes]).astype(np.float32)


def normal(rng, *axes):
    return hax.named(raw_normal(rng, *axes), axes)


@settings(max_examples=6)
@given(st.integers(1, 4), st.integers(1, 4), st.booleans(), st.integers(0, 2**31 - 1))
def test_grouped_query_attention_equals_positional(q_len, k_len, causal, seed):
    Pos, KPos = hax.Axis("position", q_len), hax.Axis("key_position", k_len)
    rng = np.random.default_rng(seed)
    all_axes = ((Batch, Pos, KVHeads, QPerKV, HeadSize), *[(Batch, KPos, KVHeads, HeadSize)] * 2, (Pos, KPos))
    # numpy values, named inside the program (hax.named compiles per drawn shape); the reference stays numpy
    q, k, v, bias = (raw_normal(rng, *axes) for axes in all_axes)

    @jax.jit
    def named(*raws):
        q, k, v, bias = (hax.named(x, axes) for x, axes in zip(raws, all_axes, strict=True))
        mask = attention.causal_mask(Pos, KPos) if causal else None
        out = attention.dot_product_attention(KPos, HeadSize, q, k, v, mask=mask, bias=bias)
        return out.rearrange((Batch, Pos, KVHeads, QPerKV, HeadSize))

    raw_mask = np.tril(np.ones((q_len, k_len), bool)) if causal else None
    expected = positional_attention(q, k, v, raw_mask, bias, xp=np)
    np.testing.assert_allclose(named(q, k, v, bias).array, expected, rtol=1e-5, atol=1e-5)


def test_attention_gradients_equal_positional():
    Pos, KPos = hax.Axis("position", 3), hax.Axis("key_position", 3)
    rng = np.random.default_rng(0)
    q = normal(rng, Batch, Pos, KVHeads, QPerKV, HeadSize)
    k, v = normal(rng, Batch, KPos, KVHeads, HeadSize), normal(rng, Batch, KPos, KVHeads, HeadSize)
    mask = attention.causal_mask(Pos, KPos)

    def named(q, k, v):
        out = attention.dot_product_attention(KPos, HeadSize, q, k, v, mask=mask)
        return hax.sum(hax.square(out)).scalar()

    def positional(q, k, v):
        return jnp.sum(positional_attention(q, k, v, jnp.tril(jnp.ones((3, 3), bool))) ** 2)

    grads = jax.jit(jax.grad(named, argnums=(0, 1, 2)))(q, k, v)
    expected = jax.jit(jax.grad(positional, argnums=(0, 1, 2)))(q.array, k.array, v.array)
    for got, want, like in zip(grads, expected, (q, k, v), strict=True):
        np.testing.assert_allclose(got.rearrange(like.axes).array, want, rtol=1e-4, atol=1e-5)


def test_attention_weights_sum_to_one_over_key_positions_and_respect_the_mask():
    Pos, KPos = hax.Axis("position", 4), hax.Axis("key_position", 4)
    rng = np.random.default_rng(0)
    q, k = normal(rng, Pos, HeadSize), normal(rng, KPos, HeadSize)
    mask = attention.causal_mask(Pos, KPos)
    weights = attention.dot_product_attention_weights(HeadSize, KPos, q, k, mask=mask).rearrange((Pos, KPos))
    np.testing.assert_allclose(weights.array.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(weights.array) > 0, np.tril(np.ones((4, 4), bool)))
    scaled = attention.dot_product_attention_weights(HeadSize, KPos, q, k, scaling_factor=1.0)
    expected = jax.nn.softmax(q.array @ k.array.T, -1)
    np.testing.assert_allclose(scaled.rearrange((Pos, KPos)).array, expected, rtol=1e-5)


def test_attention_in_bfloat16_computed_in_float32_returns_bfloat16():
    Pos, KPos = hax.Axis("position", 2), hax.Axis("key_position", 2)
    q = hax.ones((Pos, HeadSize), dtype=jnp.bfloat16)
    k = hax.ones((KPos, HeadSize), dtype=jnp.bfloat16)
    weights = attention.dot_product_attention_weights(HeadSize, KPos, q, k, attention_dtype=jnp.float32)
    assert weights.dtype == jnp.bfloat16


def test_attention_rejects_key_axes_shared_with_the_query():
    Pos = hax.Axis("position", 3)
    q = hax.ones((Pos, HeadSize))
    with pytest.raises(ValueError, match="position"):
        attention.dot_product_attention(Pos, HeadSize, q, q, q)
    with pytest.raises(TypeError, match="NamedArray"):
        attention.dot_product_attention(Pos, HeadSize, q.array, q, q)


@pytest.mark.parametrize("q_start, k_start", [(0, 0), (2, 0), (0, 3)])
def test_causal_and_prefix_masks_equal_positional(q_start, k_start):
    Q, K = hax.Axis("position", 4), hax.Axis("key_position", 5)
    qi, ki = np.arange(4)[:, None] + q_start, np.arange(5)[None, :] + k_start
    causal = attention.causal_mask(Q, K, q_start, k_start).rearrange((Q, K)).array
    np.testing.assert_array_equal(causal, qi >= ki)
    prefix = attention.prefix_lm_mask(Q, K, 2, q_start, k_start).rearrange((Q, K)).array
    np.testing.assert_array_equal(prefix, (qi >= ki) | (np.arange(5)[None, :] < 2))
    with pytest.raises(ValueError, match="prefix_len"):
        attention.prefix_lm_mask(Q, K, -1)


def test_causal_mask_with_a_per_batch_offset():
    Q, K = hax.Axis("position", 3), hax.Axis("key_position", 3)
    offsets = hax.named(jnp.array([0, 1]), Batch)
    mask = attention.causal_mask(Q, K, q_start=offsets).rearrange((Batch, Q, K)).array
    np.testing.assert_array_equal(mask[0], np.tril(np.ones((3, 3), bool)))
    np.testing.assert_array_equal(mask[1], np.tril(np.ones((3, 3), bool), 1))


def test_mask_combinators_and_bias():
    Q, K = hax.Axis("position", 3), hax.Axis("key_position", 3)
    causal = attention.causal_mask(Q, K)
    first = hax.arange(K) == 0
    both = attention.combine_masks_and(causal, first).rearrange((Q, K)).array
    either = attention.combine_masks_or(causal, first).rearrange((Q, K)).array
    tril = np.tril(np.ones((3, 3), bool))
    np.testing.assert_array_equal(both, tril & (np.arange(3) == 0))
    np.testing.assert_array_equal(either, tril | (np.arange(3) == 0))
    assert attention.combine_masks_and(None, causal) is causal
    assert attention.combine_masks_or(causal, None) is causal
    bias = attention.mask_to_bias(~causal).rearrange((Q, K)).array
    np.testing.assert_array_equal(bias, np.where(tril, 0.0, -1e9))


def test_random_masks_keep_the_requested_fraction():
    K = hax.Axis("key_position", 4000)
    keep = attention.dropout_mask((K,), 0.3, key=jax.random.PRNGKey(0))
    assert abs(float(keep.array.mean()) - 0.7) < 0.03
    forgetful = attention.forgetful_causal_mask(K, 0.5, sample_prob=False, key=jax.random.PRNGKey(1))
    assert bool(forgetful.array[0]) and abs(float(forgetful.array.mean()) - 0.5) < 0.03
