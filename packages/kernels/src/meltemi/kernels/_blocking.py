"""Padding a sequence up to whole blocks, and back: how blocked kernels accept ragged lengths."""

from __future__ import annotations

import jax
import jax.numpy as jnp

PADDING_SEGMENT = -1
"""Segment id given to padded positions: they attend to nothing and nothing attends to them."""


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def pad_axis(x: jax.Array, length: int, axis: int, value: float | int = 0) -> jax.Array:
    """Pad ``x`` along ``axis`` at the end up to ``length`` (a no-op when it already has it)."""
    missing = length - x.shape[axis]
    if missing == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, missing)
    return jnp.pad(x, widths, constant_values=value)


def pad_sequence(
    q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array | None, length: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array | None]:
    """Pad ``[batch, seq, ...]`` attention inputs to ``length``; padded tokens get ``PADDING_SEGMENT``."""
    q, k, v = (pad_axis(x, length, axis=1) for x in (q, k, v))
    if segment_ids is not None:
        segment_ids = pad_axis(segment_ids.astype(jnp.int32), length, axis=1, value=PADDING_SEGMENT)
    return q, k, v, segment_ids
