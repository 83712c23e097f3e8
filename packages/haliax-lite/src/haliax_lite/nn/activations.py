"""Activation functions on named arrays: ``jax.nn``'s, applied elementwise, axes unchanged.

Each accepts a ``NamedArray``, a JAX array or a scalar and returns the same kind::

    >>> import haliax_lite as hax
    >>> x = hax.arange(hax.Axis("embed", 4)) - 2.0
    >>> hax.nn.relu(x).array.tolist()
    [0.0, 0.0, 0.0, 1.0]
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import nn as jnn

from haliax_lite import _namespace as hax

from ._positional import axis_positions, elementwise


def _unary(name: str):
    fn = getattr(jnn, name)

    def activation(a):
        return elementwise(fn, a)

    activation.__name__ = activation.__qualname__ = name
    activation.__doc__ = f"``jax.nn.{name}`` applied elementwise; named axes are kept."
    return activation


relu = _unary("relu")
relu6 = _unary("relu6")
sigmoid = _unary("sigmoid")
softplus = _unary("softplus")
soft_sign = _unary("soft_sign")
silu = _unary("silu")
swish = _unary("swish")
log_sigmoid = _unary("log_sigmoid")
hard_sigmoid = _unary("hard_sigmoid")
hard_silu = _unary("hard_silu")
hard_swish = _unary("hard_swish")
hard_tanh = _unary("hard_tanh")
selu = _unary("selu")


def gelu(a, approximate: bool = True):
    """``jax.nn.gelu`` elementwise (tanh approximation by default, as in Haliax)."""
    return elementwise(jnn.gelu, a, approximate=approximate)


def leaky_relu(a, negative_slope: float = 0.01):
    """``jax.nn.leaky_relu`` elementwise."""
    return elementwise(jnn.leaky_relu, a, negative_slope=negative_slope)


def elu(a, alpha: float = 1.0):
    """``jax.nn.elu`` elementwise."""
    return elementwise(jnn.elu, a, alpha=alpha)


def celu(a, alpha: float = 1.0):
    """``jax.nn.celu`` elementwise."""
    return elementwise(jnn.celu, a, alpha=alpha)


def quick_gelu(a):
    """GELU's sigmoid approximation, ``x * sigmoid(1.702 x)`` (as in CLIP)."""
    return a * sigmoid(1.702 * a)


def relu_squared(a):
    """``relu(x) ** 2``, the activation of Primer and modded-nanoGPT."""
    return elementwise(lambda v: jnp.square(jnn.relu(v)), a)


def glu(x: hax.NamedArray, axis) -> hax.NamedArray:
    """Gated linear unit over ``axis``: its first half gated by the sigmoid of its second half.

    The axis keeps its name and halves its size.
    """
    (position,) = axis_positions(x, axis)
    out = jnn.glu(x.array, axis=position)
    halved = x.axes[position].resize(out.shape[position])
    return hax.NamedArray(out, x.axes[:position] + (halved,) + x.axes[position + 1 :])
