"""Rotary position embeddings as Llama (and Hugging Face) compute them, Llama 3 frequency scaling included.

The head dimension is split in halves that rotate together (``rotate_half``), the convention of Hugging
Face's Llama, so exported query/key weights need no permutation.

>>> import haliax_lite as hax
>>> Pos, HeadSize = hax.Axis("position", 4), hax.Axis("head_size", 8)
>>> cos, sin = rotary_tables(Pos, HeadSize, theta=10000.0)
>>> x = hax.ones((Pos, HeadSize))
>>> rotated = apply_rotary(x, cos, sin)
>>> bool(hax.all(hax.isclose(rotated["position", 0], x["position", 0])).item())  # position 0: unrotated
True
"""

from __future__ import annotations

import math

import jax.numpy as jnp

import haliax_lite as hax
from meltemi.trainer.config import RopeScaling


def inverse_frequencies(head_size: int, theta: float, scaling: RopeScaling | None = None) -> jnp.ndarray:
    """``1 / theta^(2i / head_size)`` for each rotating pair, rescaled as Llama 3 does with ``scaling``.

    Llama 3 keeps high frequencies (wavelength under ``original / high_freq_factor``), divides low ones
    (wavelength over ``original / low_freq_factor``) by ``factor``, and interpolates smoothly between.

    >>> inverse_frequencies(4, 10000.0).tolist()
    [1.0, 0.009999999776482582]
    """
    inv = 1.0 / (theta ** (jnp.arange(0, head_size, 2, dtype=jnp.float32) / head_size))
    if scaling is None:
        return inv
    wavelength = 2 * math.pi / inv
    low_wavelength = scaling.original_max_position_embeddings / scaling.low_freq_factor
    high_wavelength = scaling.original_max_position_embeddings / scaling.high_freq_factor
    smooth = (scaling.original_max_position_embeddings / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    interpolated = (1 - smooth) * inv / scaling.factor + smooth * inv
    scaled = jnp.where(wavelength > low_wavelength, inv / scaling.factor, inv)
    in_between = (wavelength <= low_wavelength) & (wavelength >= high_wavelength)
    return jnp.where(in_between, interpolated, scaled)


def rotary_tables(
    Pos: hax.Axis, HeadSize: hax.Axis, *, theta: float, scaling: RopeScaling | None = None
) -> tuple[hax.NamedArray, hax.NamedArray]:
    """``(cos, sin)`` over ``(Pos, HeadSize)`` in float32 for positions ``0 .. Pos.size - 1``."""
    return rotary_at(hax.arange(Pos), HeadSize, theta=theta, scaling=scaling)


def rotary_at(
    positions: hax.NamedArray, HeadSize: hax.Axis, *, theta: float, scaling: RopeScaling | None = None
) -> tuple[hax.NamedArray, hax.NamedArray]:
    """``(cos, sin)`` over ``positions``' axes and ``HeadSize`` in float32, each half of ``HeadSize``
    repeating the angles: a packed row's positions restart at each document.

    >>> Batch, Pos, HeadSize = hax.Axis("batch", 1), hax.Axis("position", 4), hax.Axis("head_size", 8)
    >>> restarted = hax.named(jnp.array([[0, 1, 0, 1]]), (Batch, Pos))
    >>> cos, _ = rotary_at(restarted, HeadSize, theta=10000.0)
    >>> bool((cos.array[0, 0] == cos.array[0, 2]).all()), cos.axes[-1].name
    (True, 'head_size')
    """
    angles = positions.array.astype(jnp.float32)[..., None] * inverse_frequencies(
        HeadSize.size, theta, scaling
    )
    angles = jnp.concatenate([angles, angles], axis=-1)
    axes = (*positions.axes, HeadSize)
    return hax.named(jnp.cos(angles), axes), hax.named(jnp.sin(angles), axes)


def apply_rotary(x: hax.NamedArray, cos: hax.NamedArray, sin: hax.NamedArray) -> hax.NamedArray:
    """Rotate each pair ``(x[i], x[i + half])`` of ``x``'s ``head_size`` axis by its position's angle."""
    HeadSize = x.resolve_axis("head_size")
    Half = HeadSize.resize(HeadSize.size // 2)
    first, second = hax.split(x, HeadSize, [Half, Half])
    rotated = hax.concatenate("head_size", [-second, first])
    return x * cos.astype(x.dtype) + rotated * sin.astype(x.dtype)
