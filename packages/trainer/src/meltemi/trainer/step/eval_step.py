"""Held-out evaluation: loss (nats per token) and bits per byte, per mixture source and overall.

Bits per byte is the summed loss in bits over the bytes the targets spell (``data.tokenizer``'s byte
lengths), comparable across tokenizers; without a tokenizer only the loss is reported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp

from meltemi.trainer import adapters
from meltemi.trainer.adapters import NamedBatch
from meltemi.trainer.config import RunConfig
from meltemi.trainer.model.llama import Llama, cast_floating, with_matmul_dtype


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class BatchSums:
    """A batch's summed loss over its masked-in targets, how many there were, and the bytes they spell."""

    loss: jax.Array
    tokens: jax.Array
    bytes: jax.Array


def make_eval_step(config: RunConfig) -> Callable[[Llama, NamedBatch, jax.Array], BatchSums]:
    """``eval_step(model, batch, byte_lengths) -> BatchSums``, to be jitted under the compute mapping."""
    m = config.model

    def eval_step(model: Llama, batch: NamedBatch, byte_lengths: jax.Array) -> BatchSums:
        compute = with_matmul_dtype(
            cast_floating(model, jnp.dtype(config.trainer.compute_dtype)), m.matmul_dtype
        )
        hidden = compute.hidden_states(batch.input_ids, batch.segment_ids, batch.positions)
        unembedding = compute.unembedding()
        _, lse = adapters.token_losses(
            hidden,
            unembedding,
            batch.targets,
            batch.loss_mask,
            z_loss_weight=0.0,
            implementation=m.cross_entropy,
            block_size=m.cross_entropy_block_size,
        )
        per_token = lse - adapters.label_logits(hidden, unembedding, batch.targets)
        mask = batch.loss_mask.rearrange((adapters.BATCH, adapters.POSITION)).array
        targets = batch.targets.rearrange((adapters.BATCH, adapters.POSITION)).array
        return BatchSums(
            loss=jnp.sum(jnp.where(mask, per_token, 0.0)),
            tokens=mask.sum(dtype=jnp.float32),
            bytes=jnp.sum(jnp.where(mask, byte_lengths[targets], 0)).astype(jnp.float32),
        )

    return eval_step


def summarize(per_source: dict[str, BatchSums], with_bytes: bool) -> dict[str, float]:
    """Per source ``eval/<source>/loss`` and ``/bpb``; over all tokens ``eval/loss`` and ``eval/bpb``.

    >>> sums = {"web": BatchSums(jnp.float32(20.0), jnp.float32(10.0), jnp.float32(40.0))}
    >>> {k: round(v, 3) for k, v in summarize(sums, with_bytes=True).items()}
    {'eval/web/loss': 2.0, 'eval/web/bpb': 0.721, 'eval/loss': 2.0, 'eval/bpb': 0.721}
    """
    metrics: dict[str, float] = {}
    total = BatchSums(0.0, 0.0, 0.0)
    for name, sums in per_source.items():
        loss, tokens, nbytes = float(sums.loss), float(sums.tokens), float(sums.bytes)
        metrics[f"eval/{name}/loss"] = loss / max(tokens, 1.0)
        if with_bytes:
            metrics[f"eval/{name}/bpb"] = loss / math.log(2) / max(nbytes, 1.0)
        total = BatchSums(total.loss + loss, total.tokens + tokens, total.bytes + nbytes)
    metrics["eval/loss"] = total.loss / max(total.tokens, 1.0)
    if with_bytes:
        metrics["eval/bpb"] = total.loss / math.log(2) / max(total.bytes, 1.0)
    return metrics
