"""fp8 and int8 Linear layers against a float reference on CPU, and the bookkeeping that makes quantized
training a config switch (per-block state in Stacked, gradient overwrites, targets)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite import quantization as q

Batch, Embed, Out = hax.Axis("batch", 16), hax.Axis("embed", 64), hax.Axis("out", 32)


def _layer(seed=0):
    return hax.nn.Linear.init(Embed, Out, key=jax.random.PRNGKey(seed))


def _relative_error(a, b):
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b))


_forward = eqx.filter_jit(lambda m, x: m(x))  # jitted, for speed: eagerly each op compiled on its own


def _x(seed=1):
    return hax.random.normal(jax.random.PRNGKey(seed), (Batch, Embed))


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 1000))
def test_int8_forward_is_within_a_percent_of_float(seed):
    layer, x = _layer(seed), _x(seed + 1)
    quantized = q.quantize_linear_layers(layer, q.QuantizationConfig(int8=True))
    error = _relative_error(_forward(quantized, x).array, _forward(layer, x).array)
    assert 1e-5 < error < 0.01  # quantized (not exact), and close


def test_int8_backward_is_the_float_gradient_of_the_same_weights():
    layer, x = _layer(), _x()
    quantized = q.quantize_linear_layers(layer, q.QuantizationConfig(int8=True))

    def loss(m):
        return hax.sum(m(x) ** 2).scalar()

    g_float, g_int8 = eqx.filter_grad(loss)(layer), eqx.filter_grad(loss)(quantized)
    assert _relative_error(g_int8.weight.array, g_float.weight.array) < 0.02


def test_fp8_forward_is_close_to_float_and_its_state_follows_the_data():
    layer, x = _layer(), _x()
    quantized = q.quantize_linear_layers(layer, q.QuantizationConfig(fp8=True, amax_history_length=4))
    error = _relative_error(_forward(quantized, x).array, _forward(layer, x).array)
    assert 1e-4 < error < 0.08  # e4m3 keeps 3 mantissa bits

    def loss(m):
        return hax.sum(m(x) ** 2).scalar()

    grads = eqx.filter_jit(eqx.filter_grad(loss))(quantized)
    overwrites, grads = q.partition_for_grad_overwrite(grads)
    op = overwrites.dot_general
    assert isinstance(op, q.Fp8DotGeneralOp) and grads.dot_general is None
    np.testing.assert_allclose(op.input_amax_history[0], jnp.max(jnp.abs(x.array)), rtol=1e-6)
    np.testing.assert_allclose(op.kernel_amax_history[0], jnp.max(jnp.abs(layer.weight.array)), rtol=1e-6)
    updated = q.apply_updates(quantized, jax.tree_util.tree_map(lambda g: -0.0 * g, grads), overwrites)
    np.testing.assert_array_equal(updated.dot_general.input_amax_history, op.input_amax_history)
    np.testing.assert_array_equal(updated.weight.array, quantized.weight.array)
    # the next step scales by what the history saw: the rounding error stays small
    assert _relative_error(_forward(updated, x).array, _forward(layer, x).array) < 0.08


def test_a_stacked_model_gets_one_fp8_state_per_block_and_matches_float():
    Layers = hax.Axis("layers", 3)
    stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        Embed, Embed.alias("e2"), key=jax.random.split(jax.random.PRNGKey(0), 3)
    )
    quantized = q.quantize_linear_layers(stack, q.QuantizationConfig(fp8=True, amax_history_length=8))
    assert quantized.stacked.dot_general.input_amax_history.shape == (3, 8)
    x = _x()
    vmapped = eqx.filter_jit(lambda m, x: m.vmap(x))  # jitted, for speed: eagerly each op compiled on its own
    ref, got = vmapped(stack, x), vmapped(quantized, x)
    assert _relative_error(got.array, ref.array) < 0.08


def test_targets_pick_layers_by_name_or_path_and_a_miss_is_an_error():
    model = {"q_proj": _layer(0), "mlp": {"up": _layer(1)}}
    only_q = q.quantize_linear_layers(model, q.QuantizationConfig(int8=True, targets=["q_proj"]))
    assert isinstance(only_q["q_proj"].dot_general, q.Int8DotGeneralOp)
    assert isinstance(only_q["mlp"]["up"].dot_general, q.DefaultDotGeneralOp)
    by_path = q.quantize_linear_layers(model, q.QuantizationConfig(int8=True, targets=r"mlp\..*"))
    assert isinstance(by_path["mlp"]["up"].dot_general, q.Int8DotGeneralOp)
    with pytest.raises(q.QuantizationError, match="no Linear layer matches targets='nothing'"):
        q.quantize_linear_layers(model, q.QuantizationConfig(int8=True, targets="nothing"))
    with pytest.raises(ValueError, match="fp8 or int8, not both"):
        q.QuantizationConfig(fp8=True, int8=True)
    with pytest.warns(UserWarning, match="nothing is quantized"):
        assert q.quantize_linear_layers(model, q.QuantizationConfig()) is model


def test_quantization_state_stays_out_of_state_dicts_and_models_stay_jittable():
    quantized = q.quantize_linear_layers(_layer(), q.QuantizationConfig(fp8=True, amax_history_length=2))
    assert sorted(hax.state_dict.to_state_dict(quantized)) == ["bias", "weight"]
    assert jax.jit(lambda m: m)(_layer()).weight.axes == (Out, Embed)  # the default op has no leaves


def _current(tree):
    return q.quantize_linear_layers(tree, q.QuantizationConfig(fp8=True, fp8_scaling="current"))


def _unscaled_e4m3(x):
    """What rounding through e4m3 without a scale would give (the control the scaled op must beat)."""
    return jnp.clip(x, -448, 448).astype(jnp.float8_e4m3fn).astype(x.dtype)


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e5])
def test_fp8_current_scaling_is_close_to_float_at_any_magnitude(magnitude):
    layer, x = _layer(), _x() * magnitude
    error = _relative_error(_forward(_current(layer), x).array, _forward(layer, x).array)
    assert 1e-4 < error < 0.08  # rounded (not exact), and as close as e4m3's 3 mantissa bits allow
    if magnitude != 1.0:  # without the scale these inputs underflow or clip: the scale is what keeps them
        assert _relative_error(_unscaled_e4m3(x.array), x.array) > 0.5


def test_fp8_current_scaling_rounds_the_output_gradient_at_its_own_scale():
    layer, x = _layer(), _x()

    def loss(m, weight):  # a tiny loss: its output gradients (about 1e-9) lie far below e5m2's smallest
        return weight * hax.sum(m(x) ** 2).scalar()

    grad = eqx.filter_jit(eqx.filter_grad(loss))
    reference, got = grad(layer, 1e-9).weight.array, grad(_current(layer), 1e-9).weight.array
    assert 1e-4 < _relative_error(got, reference) < 0.15  # e5m2 keeps 2 mantissa bits


def test_fp8_current_scaling_keeps_no_state_in_plain_or_stacked_models():
    layer = _layer()
    assert jax.tree_util.tree_structure(_current(layer).weight) == jax.tree_util.tree_structure(layer.weight)
    assert len(jax.tree_util.tree_leaves(_current(layer))) == len(jax.tree_util.tree_leaves(layer))
    Layers = hax.Axis("layers", 3)
    stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(
        Embed, Embed.alias("e2"), key=jax.random.split(jax.random.PRNGKey(0), 3)
    )
    quantized = _current(stack)
    assert isinstance(quantized.stacked.dot_general, q.Fp8CurrentDotGeneralOp)
    assert len(jax.tree_util.tree_leaves(quantized)) == len(jax.tree_util.tree_leaves(stack))
    vmapped = eqx.filter_jit(lambda m, x: m.vmap(x))
    assert _relative_error(vmapped(quantized, _x()).array, vmapped(stack, _x()).array) < 0.08
    assert sorted(hax.state_dict.to_state_dict(quantized)) == sorted(hax.state_dict.to_state_dict(stack))


def test_fp8_current_scaling_lets_a_non_finite_input_through_and_an_unknown_scaling_is_named():
    layer, x = _layer(), _x()
    poisoned = hax.named(x.array.at[0, 0].set(jnp.inf), x.axes)
    assert not bool(jnp.all(jnp.isfinite(_forward(_current(layer), poisoned).array)))
    with pytest.raises(q.QuantizationError, match="fp8_scaling must be 'delayed' or 'current', got 'later'"):
        q.QuantizationConfig(fp8=True, fp8_scaling="later")
