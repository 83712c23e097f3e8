"""Contractions that ``nn.Linear`` can use in place of ``jax.lax.dot_general`` (Haliax's ``DotGeneralOp``s).

- :class:`DefaultDotGeneralOp`: plain ``jax.lax.dot_general`` (a module without leaves, so models stay
  pytrees of arrays);
- :class:`Fp8DotGeneralOp`: operands rounded through ``float8_e4m3fn`` and output gradients through
  ``float8_e5m2``, with *delayed scaling*: each tensor's scale is the largest magnitude seen in a history of
  recent steps divided by the format's maximum. The new scales and histories come back as the op's
  "gradient" (it is an :class:`OverwriteWithGradient`), to be written over the op by
  ``hax.quantization.apply_updates``;
- :class:`Fp8CurrentDotGeneralOp`: the same roundings with *current scaling*: each tensor's scale is its
  own largest magnitude divided by the format's maximum, computed where it is rounded (one reduction per
  tensor), so the op keeps no state and a model using it is a pytree of its weights only (what
  Transformer Engine's current-scaling recipe and torchao's tensorwise scaling do);
- :class:`Int8DotGeneralOp`: operands rounded to int8 with one scale per row of each operand (over the
  contracted dimensions), multiplied in int32; the backward pass is the float one (a straight-through
  estimator), so it needs no state.

The ops write nothing into state dicts: their state is training bookkeeping, not weights.

>>> import jax.numpy as jnp
>>> x, w = jnp.ones((2, 3)), jnp.full((3, 4), 0.5)
>>> Int8DotGeneralOp.init()(x, w, (((1,), (0,)), ((), ()))).tolist()[0]
[1.5, 1.5, 1.5, 1.5]
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp

from .serialization import ModuleWithStateDictSerialization

__all__ = [
    "DefaultDotGeneralOp",
    "DotGeneralOp",
    "Fp8CurrentDotGeneralOp",
    "Fp8DotGeneralOp",
    "Int8DotGeneralOp",
    "OverwriteWithGradient",
]


class DotGeneralOp(Protocol):
    """What ``Linear`` calls to contract: ``jax.lax.dot_general``'s signature."""

    def __call__(
        self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs
    ): ...


class _Stateless(ModuleWithStateDictSerialization):
    """An op that contributes no state-dict entries and reads none."""

    def iter_state_dict(self, prefix: str | None = None):
        return iter(())

    def from_state_dict(self, state_dict, prefix: str | None = None):
        return self


class DefaultDotGeneralOp(_Stateless):
    """``jax.lax.dot_general`` as a module with no leaves (a bare function would be a pytree leaf)."""

    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
        return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type, **kwargs)

    @staticmethod
    def init() -> DefaultDotGeneralOp:
        return DefaultDotGeneralOp()


class OverwriteWithGradient(_Stateless):
    """A marker: this module's "gradient" is its next state, written over it rather than added to it."""


# --- fp8 with delayed scaling -------------------------------------------------------------------------


def _round_through(x, fp8_dtype, scale, compute_dtype):
    """``x`` rounded to ``fp8_dtype`` at ``scale`` (clipped to the format's range) and back."""
    largest = jnp.finfo(fp8_dtype).max.astype(compute_dtype)
    scaled = jnp.clip(x / scale.astype(compute_dtype), -largest, largest)
    return scaled.astype(fp8_dtype).astype(compute_dtype) * scale.astype(compute_dtype)


def _delayed_scale(x, fp8_dtype, scale, history, compute_dtype):
    """``x`` rounded at the scale its history gives, the new scale, and the history with |x|'s max added."""
    seen = jnp.max(history)
    usable = (seen > 0) & jnp.isfinite(seen)
    new_scale = jnp.where(usable, seen / jnp.finfo(fp8_dtype).max.astype(jnp.float32), scale)
    new_history = jnp.concatenate([jnp.max(jnp.abs(x)).astype(history.dtype)[None], history[:-1]])
    return _round_through(x, fp8_dtype, new_scale, compute_dtype), new_scale, new_history


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _operand_fp8(compute_dtype, x, scale, history):
    return _delayed_scale(x, jnp.float8_e4m3fn, scale, history, compute_dtype)[0]


def _operand_fp8_fwd(compute_dtype, x, scale, history):
    rounded, new_scale, new_history = _delayed_scale(x, jnp.float8_e4m3fn, scale, history, compute_dtype)
    return rounded, (new_scale, new_history)


def _operand_fp8_bwd(compute_dtype, state, g):
    new_scale, new_history = state
    return g, new_scale, new_history  # the state's "gradient" is its next value


_operand_fp8.defvjp(_operand_fp8_fwd, _operand_fp8_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _output_grad_fp8(compute_dtype, y, scale, history):
    return y


def _output_grad_fp8_fwd(compute_dtype, y, scale, history):
    return y, (scale, history)


def _output_grad_fp8_bwd(compute_dtype, state, g):
    scale, history = state
    return _delayed_scale(g, jnp.float8_e5m2, scale, history, compute_dtype)


_output_grad_fp8.defvjp(_output_grad_fp8_fwd, _output_grad_fp8_bwd)


class Fp8DotGeneralOp(OverwriteWithGradient):
    """An fp8 contraction with delayed scaling (see the module docs); state per tensor: a scale and a
    history of the largest magnitudes seen."""

    input_scale: jax.Array
    output_grad_scale: jax.Array
    kernel_scale: jax.Array
    input_amax_history: jax.Array
    output_grad_amax_history: jax.Array
    kernel_amax_history: jax.Array
    compute_dtype: Any = eqx.field(static=True, default=None)

    @classmethod
    def init(cls, amax_history_length: int = 1024, compute_dtype=None) -> Fp8DotGeneralOp:
        if amax_history_length < 1:
            raise ValueError(f"Fp8DotGeneralOp: amax_history_length must be >= 1, got {amax_history_length}")
        one, history = jnp.ones(1, jnp.float32), jnp.zeros(amax_history_length, jnp.float32)
        return cls(one, one, one, history, history, history, compute_dtype)

    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
        dtype = self.compute_dtype if self.compute_dtype is not None else rhs.dtype
        x = _operand_fp8(dtype, jnp.asarray(lhs, dtype), self.input_scale, self.input_amax_history)
        k = _operand_fp8(dtype, jnp.asarray(rhs, dtype), self.kernel_scale, self.kernel_amax_history)
        y = jax.lax.dot_general(x, k, dimension_numbers, precision, preferred_element_type, **kwargs)
        return _output_grad_fp8(dtype, y, self.output_grad_scale, self.output_grad_amax_history)


# --- fp8 with current scaling -------------------------------------------------------------------------


def _current_round(x, fp8_dtype, compute_dtype):
    """``x`` rounded to ``fp8_dtype`` at the scale its own largest magnitude gives (1 for an all-zero ``x``;
    a NaN or infinite ``x`` stays non-finite, so a step that checks its loss still sees it)."""
    amax = jnp.max(jnp.abs(x)).astype(jnp.float32)
    largest = jnp.finfo(fp8_dtype).max.astype(jnp.float32)
    scale = jnp.where(amax > 0, amax / largest, jnp.ones((), jnp.float32))
    return _round_through(x, fp8_dtype, scale, compute_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _operand_fp8_current(compute_dtype, x):
    return _current_round(x, jnp.float8_e4m3fn, compute_dtype)


def _operand_fp8_current_fwd(compute_dtype, x):
    return _operand_fp8_current(compute_dtype, x), None


def _operand_fp8_current_bwd(compute_dtype, residual, g):
    return (g,)  # straight through: the contraction's own backward already saw the rounded operand


_operand_fp8_current.defvjp(_operand_fp8_current_fwd, _operand_fp8_current_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _output_grad_fp8_current(compute_dtype, y):
    return y


def _output_grad_fp8_current_fwd(compute_dtype, y):
    return y, None


def _output_grad_fp8_current_bwd(compute_dtype, residual, g):
    return (_current_round(g, jnp.float8_e5m2, compute_dtype),)


_output_grad_fp8_current.defvjp(_output_grad_fp8_current_fwd, _output_grad_fp8_current_bwd)


class Fp8CurrentDotGeneralOp(_Stateless):
    """An fp8 contraction with current scaling: operands rounded through ``float8_e4m3fn`` and the output's
    gradient through ``float8_e5m2``, each at the scale of its own largest magnitude. No state: nothing to
    checkpoint or to keep out of the optimizer.

    >>> import jax.numpy as jnp
    >>> x, w = jnp.full((2, 3), 1e-6), jnp.full((3, 4), 3e4)
    >>> y = Fp8CurrentDotGeneralOp.init()(x, w, (((1,), (0,)), ((), ())))  # both out of e4m3's range
    >>> round(float(y[0, 0]), 6)
    0.09
    """

    compute_dtype: Any = eqx.field(static=True, default=None)

    @classmethod
    def init(cls, compute_dtype=None) -> Fp8CurrentDotGeneralOp:
        return cls(compute_dtype)

    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
        dtype = self.compute_dtype if self.compute_dtype is not None else rhs.dtype
        x = _operand_fp8_current(dtype, jnp.asarray(lhs, dtype))
        k = _operand_fp8_current(dtype, jnp.asarray(rhs, dtype))
        y = jax.lax.dot_general(x, k, dimension_numbers, precision, preferred_element_type, **kwargs)
        return _output_grad_fp8_current(dtype, y)


# --- int8 ---------------------------------------------------------------------------------------------


def _int8_rows(x, contracting):
    """``x`` as int8 with one scale per slice over the ``contracting`` dims (kept as size-1 dims)."""
    scale = jnp.max(jnp.abs(x), axis=contracting, keepdims=True) / 127.0
    scale = jnp.where(scale > 0, scale, 1.0)
    return jnp.round(x / scale).astype(jnp.int8), scale


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _int8_dot(lhs, rhs, dimension_numbers):
    (lhs_contract, rhs_contract), _ = dimension_numbers
    q_lhs, lhs_scale = _int8_rows(lhs, lhs_contract)
    q_rhs, rhs_scale = _int8_rows(rhs, rhs_contract)
    exact = jax.lax.dot_general(q_lhs, q_rhs, dimension_numbers, preferred_element_type=jnp.int32)
    # the scales have size-1 contracted dims, so contracting them lays out their products like the result
    scales = jax.lax.dot_general(lhs_scale, rhs_scale, dimension_numbers)
    return (exact.astype(scales.dtype) * scales).astype(jnp.result_type(lhs, rhs))


def _int8_dot_fwd(lhs, rhs, dimension_numbers):
    return _int8_dot(lhs, rhs, dimension_numbers), (lhs, rhs)


def _int8_dot_bwd(dimension_numbers, operands, g):
    _, vjp = jax.vjp(lambda a, b: jax.lax.dot_general(a, b, dimension_numbers), *operands)
    return vjp(g)


_int8_dot.defvjp(_int8_dot_fwd, _int8_dot_bwd)


class Int8DotGeneralOp(OverwriteWithGradient):
    """An int8 forward contraction (per-row scales, int32 accumulation) with a float backward pass."""

    @classmethod
    def init(cls) -> Int8DotGeneralOp:
        return cls()

    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None, **kwargs):
        out = _int8_dot(lhs, rhs, dimension_numbers)
        if kwargs.get("out_sharding") is not None:
            out = jax.sharding.reshard(out, kwargs["out_sharding"])
        return out if preferred_element_type is None else out.astype(preferred_element_type)
