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
    "ball bernoulli beta categorical cauchy choice exponential gamma gumbel laplace logistic loggamma normal "
    "pareto permutation poisson rademacher randint t truncated_normal uniform weibull_min"
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


def _parametrised(jax_fn, key, shape: AxisSpec, dtype, **params) -> NamedArray:
    """``jax_fn(key, *params, shape, dtype)`` with each named parameter broadcast by name to ``shape``."""
    axes = sized_axes(shape, "A random draw")
    raw = {name: _param(value, axes) for name, value in params.items()}
    return NamedArray(jax_fn(key, **raw, shape=_dims(axes), dtype=dtype), axes)


def poisson(key, shape: AxisSpec, lam, dtype=int) -> NamedArray:
    """Poisson counts with rate ``lam`` (a number or a NamedArray broadcast by name).

    >>> import jax, haliax_lite as hax
    >>> lam = hax.named(jnp.array([1.0, 50.0]), "rate")
    >>> draws = poisson(jax.random.PRNGKey(0), (hax.Axis("sample", 4000), hax.Axis("rate", 2)), lam)
    >>> [round(float(m)) for m in draws.mean("sample").array]
    [1, 50]
    """
    return _parametrised(jax.random.poisson, key, shape, dtype, lam=lam)


def gamma(key, shape: AxisSpec, a, dtype=float) -> NamedArray:
    """Gamma samples of shape parameter ``a`` (unit scale)."""
    return _parametrised(jax.random.gamma, key, shape, dtype, a=a)


def loggamma(key, shape: AxisSpec, a, dtype=float) -> NamedArray:
    """The logarithm of gamma samples of shape parameter ``a`` (accurate for small ``a``)."""
    return _parametrised(jax.random.loggamma, key, shape, dtype, a=a)


def beta(key, shape: AxisSpec, a, b, dtype=float) -> NamedArray:
    """Beta samples with parameters ``a`` and ``b``."""
    return _parametrised(jax.random.beta, key, shape, dtype, a=a, b=b)


def t(key, shape: AxisSpec, df, dtype=float) -> NamedArray:
    """Student's t samples with ``df`` degrees of freedom."""
    return _parametrised(jax.random.t, key, shape, dtype, df=df)


def weibull_min(key, shape: AxisSpec, scale, concentration, dtype=float) -> NamedArray:
    """Weibull samples with the given ``scale`` and ``concentration``."""
    return _parametrised(jax.random.weibull_min, key, shape, dtype, scale=scale, concentration=concentration)


def pareto(key, shape: AxisSpec, b, dtype=float) -> NamedArray:
    """Pareto samples with shape parameter ``b`` (support ``[1, inf)``)."""
    return _parametrised(jax.random.pareto, key, shape, dtype, b=b)


def ball(key, shape: AxisSpec, D: Axis, p: float = 2.0, dtype=float) -> NamedArray:
    """Points drawn uniformly from the unit ``p``-norm ball in ``D.size`` dimensions; the result's axes are
    ``shape`` then ``D`` (as Haliax).

    >>> import jax, haliax_lite as hax
    >>> pts = ball(jax.random.PRNGKey(0), hax.Axis("n", 5), hax.Axis("dim", 3))
    >>> pts.shape, bool((hax.sqrt(hax.sum(pts * pts, "dim")) <= 1).all())
    ({'n': 5, 'dim': 3}, True)
    """
    axes = sized_axes(shape, "A random draw")
    if not isinstance(D, Axis):
        raise ValueError(f"ball needs the dimension as an Axis with a size, got {D!r}")
    if D.name in {a.name for a in axes}:
        raise ValueError(f"ball: the dimension axis {D.name!r} is also in shape {axes}")
    return NamedArray(jax.random.ball(key, D.size, p=p, shape=_dims(axes), dtype=dtype), (*axes, D))


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
    index = logits.require_axis_indices(axis)
    batch = logits.axes[:index] + logits.axes[index + 1 :]
    axes = batch if shape is None else sized_axes(shape, "A random draw")
    moved = jnp.moveaxis(logits.array, index, -1)
    moved_named = NamedArray(moved, (*batch, logits.axes[index]))
    expanded = broadcast_to(moved_named, (*axes, logits.axes[index])).array
    return NamedArray(jax.random.categorical(key, expanded, axis=-1), axes)


def permutation(key, x: NamedArray, axis: AxisSelector, independent: bool = False) -> NamedArray:
    """``x`` with its entries shuffled along ``axis`` (each slice on its own when ``independent``)."""
    index = x.require_axis_indices(axis)
    return NamedArray(jax.random.permutation(key, x.array, axis=index, independent=independent), x.axes)


def choice(
    key, shape: AxisSpec, a: NamedArray, axis: AxisSelector, replace: bool = True, p: NamedArray | None = None
) -> NamedArray:
    """Draw entries of ``a`` along ``axis``; the drawn axis is replaced by the axes of ``shape``."""
    index = a.require_axis_indices(axis)
    axes = sized_axes(shape, "A random draw")
    probs = None
    if p is not None:
        if p.axes != (a.axes[index],) and {ax.name for ax in p.axes} != {axis_name(axis)}:
            raise ValueError(f"choice: p must have only the axis {axis_name(axis)!r}, got {p.axes}")
        probs = p.array
    drawn = jax.random.choice(key, a.array, _dims(axes), replace=replace, p=probs, axis=index)
    return NamedArray(drawn, a.axes[:index] + axes + a.axes[index + 1 :])
