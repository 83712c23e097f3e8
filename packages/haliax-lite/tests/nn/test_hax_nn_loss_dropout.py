"""Cross-entropy (with log-normalisers for a z-loss), one-hot and dropout on named arrays."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
import haliax_lite.nn as hnn

Batch, Pos, Vocab = hax.Axis("batch", 3), hax.Axis("position", 4), hax.Axis("vocab", 6)


def logits_and_labels(seed: int):
    rng = np.random.default_rng(seed)
    logits = hax.named(rng.normal(size=(3, 4, 6)).astype(np.float32) * 3, (Batch, Pos, Vocab))
    labels = hax.named(rng.integers(0, Vocab.size, size=(3, 4)), (Batch, Pos))
    return logits, labels


@settings(max_examples=5)
@given(st.integers(0, 2**31 - 1))
def test_cross_entropy_and_log_normalizers_equal_positional(seed):
    logits, labels = logits_and_labels(seed)
    targets = hnn.one_hot(labels, Vocab)
    loss, log_z = hnn.cross_entropy_loss_and_log_normalizers(logits, Vocab, targets)
    raw = logits.rearrange((Batch, Pos, Vocab)).array
    expected = -jnp.take_along_axis(jax.nn.log_softmax(raw, -1), labels.array[..., None], -1)[..., 0]
    np.testing.assert_allclose(loss.rearrange((Batch, Pos)).array, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_z.rearrange((Batch, Pos)).array, jax.nn.logsumexp(raw, -1), rtol=1e-6)

    mean = hnn.cross_entropy_loss(logits, Vocab, targets)
    assert mean.axes == ()
    np.testing.assert_allclose(mean.array, expected.mean(), rtol=1e-5)
    per_position = hnn.cross_entropy_loss(logits, Vocab, targets, reduction=None)
    np.testing.assert_allclose(per_position.rearrange((Batch, Pos)).array, expected, rtol=1e-5, atol=1e-5)
    per_batch = hnn.cross_entropy_loss(logits, Vocab, targets, reduction=hax.sum, reduction_axis=Pos)
    np.testing.assert_allclose(per_batch.array, expected.sum(1), rtol=1e-5)


def test_cross_entropy_where_masks_positions_out_of_the_mean_and_zeroes_them_unreduced():
    logits, labels = logits_and_labels(0)
    targets = hnn.one_hot(labels, Vocab)
    where = hax.arange(Pos) < 2
    full = hnn.cross_entropy_loss(logits, Vocab, targets, reduction=None).rearrange((Batch, Pos)).array
    masked_mean = hnn.cross_entropy_loss(logits, Vocab, targets, where=where)
    np.testing.assert_allclose(masked_mean.array, full[:, :2].mean(), rtol=1e-5)
    zeroed = hnn.cross_entropy_loss(logits, Vocab, targets, reduction=None, where=where)
    np.testing.assert_allclose(zeroed.rearrange((Batch, Pos)).array[:, 2:], 0.0)


def test_z_loss_gradient_equals_positional_gradient():
    logits, labels = logits_and_labels(1)
    targets = hnn.one_hot(labels, Vocab)

    def named(logits):
        loss, log_z = hnn.cross_entropy_loss_and_log_normalizers(logits, Vocab, targets)
        return (hax.mean(loss) + 1e-2 * hax.mean(hax.square(log_z))).scalar()

    def positional(raw):
        log_z = jax.nn.logsumexp(raw, -1)
        picked = jnp.take_along_axis(raw, labels.array[..., None], -1)[..., 0]
        return jnp.mean(log_z - picked) + 1e-2 * jnp.mean(log_z**2)

    @jax.jit  # one program, for speed: eagerly each op of both gradients compiled on its own
    def values_and_gradients(logits):
        raw = logits.rearrange((Batch, Pos, Vocab)).array
        return jax.value_and_grad(named)(logits), jax.value_and_grad(positional)(raw)

    (value, grad), (expected, expected_grad) = values_and_gradients(logits)
    np.testing.assert_allclose(value, expected, rtol=1e-6)
    np.testing.assert_allclose(grad.rearrange((Batch, Pos, Vocab)).array, expected_grad, rtol=1e-5, atol=1e-7)


def test_integer_targets_warn():
    logits, labels = logits_and_labels(2)
    with pytest.warns(UserWarning, match="floating"):
        hnn.cross_entropy_loss(logits, Vocab, hnn.one_hot(labels, Vocab, dtype=jnp.int32))


def test_binary_cross_entropy_equals_positional():
    logits, _ = logits_and_labels(3)
    targets = hax.named(np.random.default_rng(4).uniform(size=(3, 4, 6)).astype(np.float32), logits.axes)
    raw, t = logits.array, targets.array
    expected = -(t * jax.nn.log_sigmoid(raw) + (1 - t) * jax.nn.log_sigmoid(-raw))
    loss = hnn.binary_cross_entropy_loss(logits, targets)
    np.testing.assert_allclose(loss.array, expected.mean(), rtol=1e-5)


def test_one_hot_of_arrays_and_of_ints():
    labels = hax.named(jnp.array([0, 5, 2]), Batch)
    out = hnn.one_hot(labels, Vocab)
    assert out.axes == (Batch, Vocab)
    np.testing.assert_array_equal(out.array, np.eye(6)[[0, 5, 2]])
    single = hnn.one_hot(-1, Vocab, dtype=jnp.int32)
    assert single.axes == (Vocab,) and single.dtype == jnp.int32
    np.testing.assert_array_equal(single.array, [0, 0, 0, 0, 0, 1])
    with pytest.raises(ValueError, match="vocab"):
        hnn.one_hot(6, Vocab)


def test_dropout_keeps_with_probability_one_minus_p_and_rescales():
    Embed = hax.Axis("embed", 4000)
    x = hax.ones((Batch, Embed))
    out = hnn.dropout(x, 0.25, inference=False, key=jax.random.PRNGKey(0))
    values = np.asarray(out.array)
    np.testing.assert_allclose(np.unique(values), [0.0, 1 / 0.75], rtol=1e-6)
    assert abs((values == 0).mean() - 0.25) < 0.02


def test_dropout_broadcast_axes_share_one_mask():
    Embed = hax.Axis("embed", 64)
    x = hax.named(np.random.default_rng(1).normal(size=(3, 64)).astype(np.float32), (Batch, Embed))
    layer = hnn.Dropout(0.5, broadcast_axes=Batch)
    dropped = np.asarray((layer(x, key=jax.random.PRNGKey(2)) == 0).rearrange((Batch, Embed)).array)
    assert (dropped == dropped[0]).all() and 0 < dropped[0].mean() < 1


def test_dropout_inference_and_edge_rates():
    x = hax.ones((Batch, Vocab))
    assert hnn.Dropout(0.5, inference=True)(x) is x
    assert hnn.Dropout(0.5)(x, inference=True) is x
    assert hnn.dropout(x, 0.0, inference=False) is x
    np.testing.assert_array_equal(hnn.dropout(x, 1.0, inference=False).array, 0.0)
    assert hnn.Dropout(0.5).is_active and not hnn.Dropout(0.0).is_active
    with pytest.raises(RuntimeError, match="key"):
        hnn.Dropout(0.5)(x)
    with pytest.raises(ValueError, match="pdrop"):
        hnn.Dropout(1.5)
