"""Random NamedArrays: ``jax.random`` with axes instead of shapes.

Parameters such as ``minval`` or ``p`` may be NamedArrays; they are broadcast by name to ``shape``.

>>> import jax, haliax_lite as hax
>>> hax.random.normal(jax.random.PRNGKey(0), (hax.Axis("batch", 2), hax.Axis("embed", 3))).shape
{'batch': 2, 'embed': 3}
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .axis import Axis, AxisSelector, AxisSpec, axis_name, sized_axes
from .broadcast import broadcast_to
from .core import NamedArray

__all__ = (
    "bernoulli categorical cauchy choice exponential gumbel laplace logistic normal permutation "
    "rademacher randint truncated_normal uniform"
).split()


def _dims(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    return tuple(a.size for a in axes)


def _param(value, axes: tuple[Axis, ...]):
    """A parameter as a raw array broadcast to ``axes`` (or unchanged if not named)."""
    return broadcast_to(value, axes).array if isinstance(value, NamedArray) else value


def uniform(key, shape: AxisSpec, dtype=float, minval=0.0, maxval=1.0) -> NamedArray:
    """Uniform samples in ``[minval, maxval)``."""
    axes = sized_axes(shape, "A random draw")
    lo, hi = _param(minval, axes), _param(maxval, axes)
    return NamedArray(jax.random.uniform(key, _dims(axes), dtype=dtype, minval=lo, maxval=hi), axes)


def bernoulli(key, shape: AxisSpec, p) -> NamedArray:
    """Boolean samples that are True with probability ``p``."""
    axes = sized_axes(shape, "A random draw")
    return NamedArray(jax.random.bernoulli(key, _param(p, axes), _dims(axes)), axes)


def randint(key, shape: AxisSpec, minval, maxval, dtype=int) -> NamedArray:
    """Integers in ``[minval, maxval)``."""
    axes = sized_axes(shape, "A random draw")
    lo, hi = _param(minval, axes), _param(maxval, axes)
    return NamedArray(jax.random.randint(key, _dims(axes), lo, hi, dtype=dtype), axes)


def truncated_normal(key, shape: AxisSpec, lower, upper, dtype=float) -> NamedArray:
    """Normal samples truncated to ``[lower, upper]``."""
    axes = sized_axes(shape, "A random draw")
    lo, hi = _param(lower, axes), _param(upper, axes)
    return NamedArray(jax.random.truncated_normal(key, lo, hi, _dims(axes), dtype=dtype), axes)


def _simple(jax_fn, default_dtype=float):
    def sample(key, shape: AxisSpec, dtype=default_dtype) -> NamedArray:
        axes = sized_axes(shape, "A random draw")
        return NamedArray(jax_fn(key, _dims(axes), dtype=dtype), axes)

    sample.__name__ = jax_fn.__name__
    sample.__doc__ = f"``jax.random.{jax_fn.__name__}`` samples of the given axes."
    return sample


normal = _simple(jax.random.normal)
gumbel = _simple(jax.random.gumbel)
laplace = _simple(jax.random.laplace)
cauchy = _simple(jax.random.cauchy)
logistic = _simple(jax.random.logistic)
exponential = _simple(jax.random.exponential)
rademacher = _simple(jax.random.rademacher, default_dtype=int)


def categorical(key, logits: NamedArray, axis: AxisSelector, shape: AxisSpec | None = None) -> NamedArray:
    """Indices along ``axis`` drawn with probabilities ``softmax(logits)``; the result drops ``axis``.

    ``shape`` (default: the other axes of ``logits``) must contain those other axes.
    """
    index = logits.axis_indices(axis)
    batch = logits.axes[:index] + logits.axes[index + 1 :]
    axes = batch if shape is None else sized_axes(shape, "A random draw")
    moved = jnp.moveaxis(logits.array, index, -1)
    moved_named = NamedArray(moved, (*batch, logits.axes[index]))
    expanded = broadcast_to(moved_named, (*axes, logits.axes[index])).array
    return NamedArray(jax.random.categorical(key, expanded, axis=-1), axes)


def permutation(key, x: NamedArray, axis: AxisSelector, independent: bool = False) -> NamedArray:
    """``x`` with its entries shuffled along ``axis`` (each slice on its own when ``independent``)."""
    index = x.axis_indices(axis)
    return NamedArray(jax.random.permutation(key, x.array, axis=index, independent=independent), x.axes)


def choice(
    key, shape: AxisSpec, a: NamedArray, axis: AxisSelector, replace: bool = True, p: NamedArray | None = None
) -> NamedArray:
    """Draw entries of ``a`` along ``axis``; the drawn axis is replaced by the axes of ``shape``."""
    index = a.axis_indices(axis)
    axes = sized_axes(shape, "A random draw")
    probs = None
    if p is not None:
        if p.axes != (a.axes[index],) and {ax.name for ax in p.axes} != {axis_name(axis)}:
            raise ValueError(f"choice: p must have only the axis {axis_name(axis)!r}, got {p.axes}")
        probs = p.array
    drawn = jax.random.choice(key, a.array, _dims(axes), replace=replace, p=probs, axis=index)
    return NamedArray(drawn, a.axes[:index] + axes + a.axes[index + 1 :])
