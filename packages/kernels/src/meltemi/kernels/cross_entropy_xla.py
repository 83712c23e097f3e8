"""Cross-entropy in vocabulary blocks (plain JAX): the ``[tokens, vocab]`` logits never exist.

The forward scans vocabulary blocks keeping a running max, a running sum of exponentials and the label's
logit per token. The backward (a custom VJP) scans the blocks again, recomputes each block's logits, forms
``d_logits = softmax * d_lse - onehot * d_loss`` for that block only, and accumulates ``d_hidden`` and writes
the block's slice of ``d_unembedding``. Peak extra memory is a few ``[tokens, block]`` buffers.

Every block has the same size: the last one starts at ``vocab - block`` and masks the columns an earlier
block already covered, so no padded copy of the unembedding is ever made. The backward writes those columns'
gradient again (it depends on the column alone) rather than reading the earlier values back.

Two details keep a bfloat16 unembedding from costing whole-matrix copies on XLA's CPU backend, which has no
bfloat16 ``dynamic-slice`` and upcasts the slice's entire operand to float32 instead: each block is sliced
through an optimization barrier that ties the matrix to the loop-varying block start, so loop-invariant code
motion cannot hoist that 2 GiB (Llama 3 vocabulary) float32 conversion out of the scan; and ``d_unembedding``
is carried in the unembedding's dtype and only ever written, so it is updated in place.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

DEFAULT_BLOCK_SIZE = 4096


def xla_cross_entropy(
    hidden: jax.Array,
    unembedding: jax.Array,
    labels: jax.Array,
    weights: jax.Array,
    z_loss_weight: float,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> tuple[jax.Array, jax.Array]:
    """Blockwise cross-entropy, same contract as ``reference_cross_entropy``.

    >>> import jax.numpy as jnp
    >>> loss, lse = xla_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((3, 5)), jnp.array([0, 4]),
    ...                               jnp.full((2,), 0.5), 0.0, block_size=2)
    >>> round(float(loss), 4), lse.shape
    (1.6094, (2,))
    """
    block = min(block_size, unembedding.shape[1])
    return _fused(float(z_loss_weight), block, hidden, unembedding, labels.astype(jnp.int32), weights)


def _block(hidden, unembedding, labels, i, block):
    """Block ``i``'s start, columns, logits, label one-hot, and which columns no earlier block covered."""
    start = jnp.minimum(i * block, unembedding.shape[1] - block)
    # Tie the whole matrix to the loop-varying start: the CPU backend slices bfloat16 by converting the
    # slice's whole operand to float32, a conversion that would otherwise be hoisted out of the loop.
    whole, start = lax.optimization_barrier((unembedding, start))
    columns = lax.dynamic_slice_in_dim(whole, start, block, axis=1)
    logits = jnp.dot(hidden, columns, preferred_element_type=jnp.float32)
    is_label = start + jnp.arange(block)[None, :] == labels[:, None]
    fresh = start + jnp.arange(block) >= i * block
    return start, columns, logits, is_label, fresh


def _forward(block, hidden, unembedding, labels):
    num_blocks = -(-unembedding.shape[1] // block)

    def step(carry, i):
        row_max, sum_exp, label_logit = carry
        _, _, logits, is_label, fresh = _block(hidden, unembedding, labels, i, block)
        logits = jnp.where(fresh[None, :], logits, -jnp.inf)
        is_label = is_label & fresh[None, :]
        new_max = jnp.maximum(row_max, logits.max(axis=1))
        sum_exp = sum_exp * jnp.exp(row_max - new_max) + jnp.exp(logits - new_max[:, None]).sum(axis=1)
        label_logit = label_logit + jnp.where(is_label, logits, 0.0).sum(axis=1)
        return (new_max, sum_exp, label_logit), None

    tokens = hidden.shape[0]
    init = (
        jnp.full((tokens,), -jnp.inf, jnp.float32),
        jnp.zeros((tokens,), jnp.float32),
        jnp.zeros((tokens,), jnp.float32),
    )
    (row_max, sum_exp, label_logit), _ = lax.scan(step, init, jnp.arange(num_blocks))
    return row_max + jnp.log(sum_exp), label_logit


def _loss(lse, label_logit, weights, z_loss_weight):
    return jnp.sum(weights * (lse - label_logit + z_loss_weight * jnp.square(lse)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _fused(z_loss_weight, block, hidden, unembedding, labels, weights):
    lse, label_logit = _forward(block, hidden, unembedding, labels)
    return _loss(lse, label_logit, weights, z_loss_weight), lse


def _fused_fwd(z_loss_weight, block, hidden, unembedding, labels, weights):
    lse, label_logit = _forward(block, hidden, unembedding, labels)
    loss = _loss(lse, label_logit, weights, z_loss_weight)
    return (loss, lse), (hidden, unembedding, labels, weights, lse)


def _fused_bwd(z_loss_weight, block, residuals, cotangents):
    hidden, unembedding, labels, weights, lse = residuals
    d_loss, d_lse_direct = cotangents
    label_coefficient = d_loss * weights
    d_lse = label_coefficient * (1.0 + 2.0 * z_loss_weight * lse) + d_lse_direct
    num_blocks = -(-unembedding.shape[1] // block)

    def step(carry, i):
        d_hidden, d_unembedding = carry
        start, columns, logits, is_label, fresh = _block(hidden, unembedding, labels, i, block)
        d_logits = jnp.exp(logits - lse[:, None]) * d_lse[:, None]
        d_logits = (d_logits - jnp.where(is_label, label_coefficient[:, None], 0.0)).astype(hidden.dtype)
        # A column's gradient depends on that column alone, so columns an earlier block covered are simply
        # written again with the same values (never read back: that would keep a second copy of the
        # matrix alive); d_hidden must count them once.
        fresh_columns = jnp.where(fresh[None, :], columns, 0)
        d_hidden = d_hidden + jnp.dot(d_logits, fresh_columns.T, preferred_element_type=jnp.float32)
        d_columns = jnp.dot(hidden.T, d_logits, preferred_element_type=jnp.float32).astype(unembedding.dtype)
        return (d_hidden, lax.dynamic_update_slice_in_dim(d_unembedding, d_columns, start, axis=1)), None

    init = (jnp.zeros(hidden.shape, jnp.float32), jnp.zeros_like(unembedding))
    (d_hidden, d_unembedding), _ = lax.scan(step, init, jnp.arange(num_blocks))
    return d_hidden.astype(hidden.dtype), d_unembedding, None, None


_fused.defvjp(_fused_fwd, _fused_bwd)
