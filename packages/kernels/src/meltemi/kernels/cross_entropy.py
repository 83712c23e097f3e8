"""``cross_entropy``: next-token loss from hidden states without materializing the logits."""

from __future__ import annotations

import logging
from typing import Literal

import jax

from meltemi.kernels._checks import report_nonfinite
from meltemi.kernels._cross_entropy_args import (
    WHERE,
    check_cross_entropy_inputs,
    report_bad_labels,
    token_weights,
)
from meltemi.kernels.attention import Choice
from meltemi.kernels.cross_entropy_pallas import pallas_cross_entropy
from meltemi.kernels.cross_entropy_reference import reference_cross_entropy
from meltemi.kernels.cross_entropy_xla import DEFAULT_BLOCK_SIZE, xla_cross_entropy
from meltemi.kernels.errors import UnknownImplementationError

logger = logging.getLogger(__name__)

CrossEntropyImplementation = Literal["auto", "reference", "xla", "pallas"]
IMPLEMENTATIONS = ("auto", "reference", "xla", "pallas")


def choose_cross_entropy_implementation(platform: str | None = None) -> Choice:
    """What ``implementation="auto"`` picks on ``platform`` (default: JAX's backend), and why.

    >>> choose_cross_entropy_implementation("cpu").implementation
    'xla'
    """
    platform = platform or jax.default_backend()
    if platform in ("gpu", "cuda"):
        return Choice(
            "xla",
            "GPU: the blockwise XLA version (cuBLAS matmuls); the Pallas kernel has not been measured faster",
        )
    return Choice("xla", f"{platform}: the Pallas kernel targets GPUs (Triton); blockwise XLA runs anywhere")


def cross_entropy(
    hidden: jax.Array,
    unembedding: jax.Array,
    labels: jax.Array,
    *,
    mask: jax.Array | None = None,
    z_loss_weight: float = 0.0,
    block_size: int = DEFAULT_BLOCK_SIZE,
    implementation: CrossEntropyImplementation = "auto",
    check_finite: bool = True,
    check_labels: bool = True,
) -> tuple[jax.Array, jax.Array]:
    """Mean next-token cross-entropy of ``hidden @ unembedding`` against ``labels``, blockwise over the vocab.

    ``hidden`` is ``[tokens, embed]``, ``unembedding`` ``[embed, vocab]``, ``labels`` ``[tokens]`` integers in
    ``[0, vocab)``; ``mask`` ``[tokens]`` (bool or weights) selects the tokens averaged over (all masked: loss
    0). Each token adds ``z_loss_weight * lse**2``. Returns ``(loss, lse)`` with ``lse`` the per-token
    log-normalizer in float32. ``"xla"`` and ``"pallas"`` work in vocabulary blocks of ``block_size`` and
    never build the ``[tokens, vocab]`` logits, forward or backward; ``"reference"`` does, as the oracle.

    ``hidden`` and ``unembedding`` must share a floating dtype (as ``attention``'s ``q``, ``k``, ``v``
    must): cast the unembedding to the compute dtype; matmuls accumulate in float32 either way. Labels
    outside ``[0, vocab)`` and (with ``check_finite``) NaN or infinite inputs raise ``LabelOutOfRangeError``
    and ``NonFiniteError`` naming the first bad label's position or the argument; inside ``jit`` the
    computation fails with ``jax.errors.JaxRuntimeError`` carrying the same message (see the README).
    ``check_labels=False`` skips the label check (a host callback per call under ``jit``) for a caller that
    guarantees the range itself; a label outside it then gives a meaningless loss instead of an error.

    >>> import jax, jax.numpy as jnp
    >>> hidden = jnp.ones((6, 8)); unembedding = jnp.zeros((8, 100)); labels = jnp.arange(6)
    >>> loss, lse = cross_entropy(hidden, unembedding, labels, block_size=32)
    >>> round(float(loss), 3), lse.shape
    (4.605, (6,))
    """
    check_cross_entropy_inputs(hidden, unembedding, labels, mask, z_loss_weight, block_size)
    if implementation not in IMPLEMENTATIONS:
        raise UnknownImplementationError(
            f"{WHERE}: implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}"
        )
    if check_finite:
        report_nonfinite(WHERE, hidden=hidden, unembedding=unembedding)
    if check_labels:
        report_bad_labels(labels, unembedding.shape[1])
    if implementation == "auto":
        choice = choose_cross_entropy_implementation()
        logger.debug("cross_entropy: using %s (%s)", choice.implementation, choice.reason)
        implementation = choice.implementation
    weights = token_weights(mask, hidden.shape[0])
    z_loss_weight = float(z_loss_weight)
    if implementation == "reference":
        return reference_cross_entropy(hidden, unembedding, labels, weights, z_loss_weight)
    if implementation == "pallas":
        return pallas_cross_entropy(
            hidden, unembedding, labels, weights, z_loss_weight, block_size=block_size
        )
    return xla_cross_entropy(hidden, unembedding, labels, weights, z_loss_weight, block_size=block_size)
