"""Pooling over named windows equals jax.lax.reduce_window on the same positions; ALiBi slopes follow the
paper for power-of-two head counts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

Batch, Height, Width, Chan = hax.Axis("batch", 2), hax.Axis("h", 6), hax.Axis("w", 5), hax.Axis("c", 3)


@settings(max_examples=20)
@given(
    st.permutations([Batch, Height, Width, Chan]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 2),
    st.sampled_from(["max", "min", "mean"]),
)
def test_pools_equal_reduce_window_in_any_axis_order(order, wh, ww, stride, kind):
    raw = np.random.default_rng(0).normal(size=(2, 6, 5, 3)).astype(np.float32)
    pool = getattr(hax.nn, f"{kind}_pool")
    op, init = {"max": (jax.lax.max, -np.inf), "min": (jax.lax.min, np.inf), "mean": (jax.lax.add, 0.0)}[kind]

    @jax.jit  # one program per example, with the reference: eager calls compile each primitive per shape
    def run(raw):
        x = hax.named(raw, (Batch, Height, Width, Chan)).rearrange(tuple(order))
        out = pool({"h": wh, "w": ww}, x, stride=stride).rearrange((Batch, Height.name, Width.name, Chan))
        expected = jax.lax.reduce_window(raw, init, op, (1, wh, ww, 1), (1, stride, stride, 1), "VALID")
        return out, expected / (wh * ww) if kind == "mean" else expected

    out, expected = run(raw)
    assert out.axes[1] == Height.resize(expected.shape[1]) and out.axes[2] == Width.resize(expected.shape[2])
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_mean_pool_padding_counts():
    x = hax.ones(hax.Axis("t", 3))
    same = hax.nn.mean_pool({"t": 2}, x, padding=[(1, 0)])
    np.testing.assert_allclose(np.asarray(same.array), [1.0, 1.0, 1.0])
    with_pad = hax.nn.mean_pool({"t": 2}, x, padding=[(1, 0)], count_include_pad=True)
    np.testing.assert_allclose(np.asarray(with_pad.array), [0.5, 1.0, 1.0])
    with pytest.raises(ValueError, match="strides"):
        hax.nn.max_pool({"t": 2}, x, stride=(1, 1))


@pytest.mark.parametrize("n_heads", [1, 2, 4, 8])
def test_alibi_slopes_are_the_papers_for_powers_of_two(n_heads):
    Heads, KPos = hax.Axis("heads", n_heads), hax.Axis("key_position", 7)
    bias = hax.nn.attention.alibi_attention_bias(Heads, KPos)
    assert bias.axes == (Heads, KPos)
    slopes = np.array([2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)])
    np.testing.assert_allclose(np.asarray(bias.array), slopes[:, None] * np.arange(7)[None, :], rtol=1e-6)


def test_alibi_for_other_head_counts_interleaves_the_next_power_of_two():
    bias = hax.nn.attention.alibi_attention_bias(hax.Axis("heads", 3), hax.Axis("key_position", 2))
    four = [2.0 ** (-8.0 * (h + 1) / 4) for h in range(4)]
    two = [2.0 ** (-8.0 * (h + 1) / 2) for h in range(2)]
    np.testing.assert_allclose(np.asarray(bias.array)[:, 1], two + four[0::2][:1], rtol=1e-6)
    assert bias.dtype == jnp.float32
