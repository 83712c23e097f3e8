"""Normalisation over named axes: ``LayerNorm``, ``RmsNorm``, ``softmax``, ``log_softmax``, ``logsumexp``.

The layers normalise over the axes they were built for, so a batch or position axis is never normalised by
mistake; the functions take the axis by name::

    >>> import haliax_lite as hax
    >>> Embed = hax.Axis("embed", 4)
    >>> norm = hax.nn.RmsNorm.init(Embed, use_bias=False)
    >>> norm(hax.ones(Embed) * 3).array.round(3).tolist()
    [1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jax import nn as jnn

from haliax_lite import _namespace as hax

from ._positional import axiswise, reduction


class LayerNormBase(eqx.Module):
    """Shared parameters and ``init`` of the normalisation layers: an optional scale and bias on ``axis``."""

    axis: hax.AxisSpec = eqx.field(static=True)
    weight: hax.NamedArray | None
    bias: hax.NamedArray | None
    eps: float = eqx.field(default=1e-5, static=True)
    dtype: jnp.dtype | None = eqx.field(default=None, static=True)

    @classmethod
    def init(
        cls,
        axis: hax.AxisSpec,
        eps: float = 1e-5,
        *,
        use_weight: bool = True,
        use_bias: bool = True,
        dtype: jnp.dtype | None = None,
    ):
        """A layer normalising over ``axis`` with a unit scale and a zero bias (each optional).

        ``dtype``, when given, is the dtype the statistics are computed in; the output keeps the input's.
        """
        weight = hax.ones(axis) if use_weight else None
        bias = hax.zeros(axis) if use_bias else None
        return cls(axis, weight, bias, eps, dtype)

    def _scale_and_shift(self, out: hax.NamedArray) -> hax.NamedArray:
        if self.weight is not None:
            out = self.weight * out
        if self.bias is not None:
            out = out + self.bias
        return out


class LayerNorm(LayerNormBase):
    """Subtract the mean and divide by the standard deviation over ``axis``, then scale and shift."""

    def __call__(self, x: hax.NamedArray) -> hax.NamedArray:
        in_dtype = x.dtype
        if self.dtype is not None:
            x = x.astype(self.dtype)
        mean = hax.mean(x, axis=self.axis)
        var = hax.var(x, axis=self.axis)
        out = ((x - mean) * hax.rsqrt(var + self.eps)).astype(in_dtype)
        return self._scale_and_shift(out)


class RmsNorm(LayerNormBase):
    """Divide by the root mean square over ``axis`` (no centring), then scale and shift."""

    def __call__(self, x: hax.NamedArray) -> hax.NamedArray:
        in_dtype = x.dtype
        if self.dtype is not None:
            x = x.astype(self.dtype)
        mean_square = hax.mean(hax.square(x), axis=self.axis)
        out = (x * hax.rsqrt(mean_square + self.eps)).astype(in_dtype)
        return self._scale_and_shift(out)


def softmax(a, axis: hax.AxisSelection | None = None):
    """``jax.nn.softmax`` over the named ``axis`` (one or several; all when ``None``)."""
    return axiswise(jnn.softmax, a, axis)


def log_softmax(a, axis: hax.AxisSelection | None = None):
    """``jax.nn.log_softmax`` over the named ``axis`` (one or several; all when ``None``)."""
    return axiswise(jnn.log_softmax, a, axis)


def logsumexp(a, axis: hax.AxisSelection | None = None):
    """``log(sum(exp(a)))`` over ``axis``, computed stably; the reduced axes are dropped."""
    return reduction(jnn.logsumexp, a, axis)


def standardize(
    x: hax.NamedArray,
    axis: hax.AxisSpec,
    *,
    mean: hax.NamedArray | None = None,
    variance: hax.NamedArray | None = None,
    epsilon: float = 1e-5,
    where: hax.NamedArray | None = None,
) -> hax.NamedArray:
    """``(x - mean) / sqrt(variance + epsilon)`` over ``axis``; statistics are computed when not given.

    ``where`` restricts which entries the computed statistics see.
    """
    if mean is None:
        mean = hax.mean(x, axis=axis, where=where)
    if variance is None:
        variance = hax.mean(hax.square(x - mean), axis=axis, where=where)
    return (x - mean) * hax.rsqrt(variance + epsilon)
