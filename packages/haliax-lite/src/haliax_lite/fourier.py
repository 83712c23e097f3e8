"""Discrete Fourier transforms along a named axis (``jax.numpy.fft`` by name).

The transformed axis keeps its name and place; its size becomes the transform's output length. ``axis``
may be a name, an Axis, or ``{name: n}`` to pad or truncate the input to ``n`` points first (numpy's
``n``). ``fftfreq``/``rfftfreq`` give the sample frequencies as a NamedArray along an axis.

>>> import haliax_lite as hax
>>> T = hax.Axis("t", 4)
>>> hax.fft(hax.ones(T), "t").array.real.tolist()
[4.0, 0.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax.numpy as jnp

from .axis import Axis, AxisSelection, AxisSelector, axis_name, ensure_tuple
from .core import NamedArray

__all__ = ["fft", "fftfreq", "fftshift", "hfft", "ifft", "ifftshift", "ihfft", "irfft", "rfft", "rfftfreq"]


def _along(
    fn: Callable, a: NamedArray, axis: AxisSelector | Mapping[str, int] | None, norm: str | None
) -> NamedArray:
    if axis is None:
        if a.ndim != 1:
            raise ValueError(f"{fn.__name__}: name the axis to transform; the array has axes {a.axes}")
        axis = a.axes[0]
    if isinstance(axis, Mapping):
        if len(axis) != 1:
            raise ValueError(f"{fn.__name__}: transform one axis at a time, got {dict(axis)}")
        ((name, n),) = axis.items()
    else:
        name, n = axis_name(axis), None
    i = a.require_axis_indices(name)
    out = fn(a.array, n=n, axis=i, norm=norm)
    return NamedArray(out, a.axes[:i] + (a.axes[i].resize(out.shape[i]),) + a.axes[i + 1 :])


def fft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.fft`` along ``axis``."""
    return _along(jnp.fft.fft, a, axis, norm)


def ifft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.ifft`` along ``axis``."""
    return _along(jnp.fft.ifft, a, axis, norm)


def rfft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.rfft`` along ``axis`` (its size becomes ``n // 2 + 1``)."""
    return _along(jnp.fft.rfft, a, axis, norm)


def irfft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.irfft`` along ``axis`` (default output size ``2 * (m - 1)``)."""
    return _along(jnp.fft.irfft, a, axis, norm)


def hfft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.hfft`` along ``axis``."""
    return _along(jnp.fft.hfft, a, axis, norm)


def ihfft(
    a: NamedArray, axis: AxisSelector | Mapping[str, int] | None = None, norm: str | None = None
) -> NamedArray:
    """``jnp.fft.ihfft`` along ``axis``."""
    return _along(jnp.fft.ihfft, a, axis, norm)


def fftfreq(axis: Axis, d: float = 1.0) -> NamedArray:
    """The sample frequencies of an ``fft`` over ``axis.size`` points with spacing ``d``.

    >>> import haliax_lite as hax
    >>> hax.fftfreq(hax.Axis("f", 4)).array.tolist()
    [0.0, 0.25, -0.5, -0.25]
    """
    return NamedArray(jnp.fft.fftfreq(axis.size, d), (axis,))


def rfftfreq(axis: Axis, d: float = 1.0) -> NamedArray:
    """The sample frequencies of an ``rfft`` over ``axis.size`` points, along an axis of the output size."""
    freqs = jnp.fft.rfftfreq(axis.size, d)
    return NamedArray(freqs, (axis.resize(freqs.shape[0]),))


def _shift(fn: Callable, a: NamedArray, axes: AxisSelection | None) -> NamedArray:
    positions = None if axes is None else tuple(a.require_axis_indices(ax) for ax in ensure_tuple(axes))
    return NamedArray(fn(a.array, axes=positions), a.axes)


def fftshift(a: NamedArray, axes: AxisSelection | None = None) -> NamedArray:
    """``jnp.fft.fftshift`` over the named axes (all axes when None): zero frequency to the centre."""
    return _shift(jnp.fft.fftshift, a, axes)


def ifftshift(a: NamedArray, axes: AxisSelection | None = None) -> NamedArray:
    """The inverse of :func:`fftshift`."""
    return _shift(jnp.fft.ifftshift, a, axes)
