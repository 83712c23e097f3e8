"""The oracle: cross-entropy through the full ``[tokens, vocab]`` logits, in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def reference_cross_entropy(
    hidden: jax.Array, unembedding: jax.Array, labels: jax.Array, weights: jax.Array, z_loss_weight: float
) -> tuple[jax.Array, jax.Array]:
    """Weighted mean of ``lse - logit[label] + z_loss_weight * lse**2``; returns (loss, lse per token).

    >>> import jax.numpy as jnp
    >>> loss, lse = reference_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((3, 4)), jnp.array([0, 1]),
    ...                                     jnp.full((2,), 0.5), 0.0)
    >>> round(float(loss), 4), lse.shape
    (1.3863, (2,))
    """
    logits = jnp.dot(hidden, unembedding, preferred_element_type=jnp.float32)
    lse = jax.nn.logsumexp(logits, axis=-1)
    label_logits = jnp.take_along_axis(logits, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]
    per_token = lse - label_logits + z_loss_weight * jnp.square(lse)
    return jnp.sum(weights * per_token), lse
