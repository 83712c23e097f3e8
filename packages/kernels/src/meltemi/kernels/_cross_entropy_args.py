"""Validation of cross-entropy arguments, and the token weights every implementation shares."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from meltemi.kernels._checks import require, require_floating, require_integer
from meltemi.kernels.errors import LabelOutOfRangeError

WHERE = "cross_entropy"


def check_cross_entropy_inputs(
    hidden: jax.Array,
    unembedding: jax.Array,
    labels: jax.Array,
    mask: jax.Array | None,
    z_loss_weight: float,
    block_size: int,
) -> None:
    """Raise a ``BadArgumentsError`` that names the bad argument and says what was expected."""
    require(hidden.ndim == 2, WHERE, f"hidden must be [tokens, embed], got shape {tuple(hidden.shape)}")
    require(
        unembedding.ndim == 2,
        WHERE,
        f"unembedding must be [embed, vocab], got shape {tuple(unembedding.shape)}",
    )
    require_floating(WHERE, hidden=hidden, unembedding=unembedding)
    require(
        hidden.dtype == unembedding.dtype,
        WHERE,
        f"hidden and unembedding must share a dtype, got {hidden.dtype} and {unembedding.dtype} "
        "(cast the unembedding to the compute dtype)",
    )
    tokens, embed = hidden.shape
    require(
        unembedding.shape[0] == embed,
        WHERE,
        f"unembedding's embed axis ({unembedding.shape[0]}) must match hidden's ({embed})",
    )
    require(tokens > 0 and unembedding.shape[1] > 0, WHERE, "tokens and vocab must be non-empty")
    require(
        labels.shape == (tokens,), WHERE, f"labels must be [tokens] = ({tokens},), got {tuple(labels.shape)}"
    )
    require_integer(WHERE, "labels", labels)
    if mask is not None:
        require(
            mask.shape == (tokens,), WHERE, f"mask must be [tokens] = ({tokens},), got {tuple(mask.shape)}"
        )
    require(
        isinstance(z_loss_weight, int | float) and math.isfinite(z_loss_weight) and z_loss_weight >= 0,
        WHERE,
        f"z_loss_weight must be a finite number >= 0, got {z_loss_weight!r}",
    )
    require(
        isinstance(block_size, int) and not isinstance(block_size, bool) and block_size >= 1,
        WHERE,
        f"block_size must be a positive int, got {block_size!r}",
    )


def token_weights(mask: jax.Array | None, tokens: int) -> jax.Array:
    """Per-token weights that sum to 1 over the unmasked tokens (all zero when every token is masked)."""
    weights = jnp.ones((tokens,), jnp.float32) if mask is None else mask.astype(jnp.float32)
    total = weights.sum()
    return weights / jnp.where(total > 0, total, 1.0)


def _raise_if_out_of_range(vocab: int, any_bad: jax.Array, position: jax.Array, value: jax.Array) -> None:
    if any_bad:
        raise LabelOutOfRangeError(
            f"{WHERE}: labels must lie in [0, {vocab}); labels[{int(position)}] is {int(value)} "
            "(the first one outside)"
        )


def report_bad_labels(labels: jax.Array, vocab: int) -> None:
    """Raise for labels outside ``[0, vocab)``, naming the first one's position and value.

    Concrete labels raise at once; inside ``jit`` a host callback fails the computation with the same
    message (see the package README for what a jitted caller receives).

    >>> import jax.numpy as jnp
    >>> report_bad_labels(jnp.array([3, 7, -1]), vocab=5)
    Traceback (most recent call last):
    ...
    meltemi.kernels.errors.LabelOutOfRangeError: cross_entropy: labels must lie in [0, 5); labels[1] is 7 ...
    """
    bad = (labels < 0) | (labels >= vocab)
    position = jnp.argmax(bad)
    found = (jnp.any(bad), position, labels[position])
    if isinstance(found[0], jax.core.Tracer):
        jax.debug.callback(lambda *f: _raise_if_out_of_range(vocab, *f), *found)
    else:
        _raise_if_out_of_range(vocab, *found)
