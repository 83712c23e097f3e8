"""Held-out evaluation: loss (nats per token) and bits per byte, per mixture source and eval set, per tag
and overall.

Bits per byte is the summed loss in bits over the bytes the targets spell (``data.tokenizer``'s byte
lengths), comparable across tokenizers; without a tokenizer only the loss is reported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

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


def summarize(
    per_set: dict[str, BatchSums], with_bytes: bool, tags: Mapping[str, Sequence[str]] | None = None
) -> dict[str, float]:
    """The metrics of held-out sets (each source's held-out part, each eval set), as Levanter names them.

    Per set ``eval/<set>/loss`` (nats per target token) and ``/bpb`` (bits per byte of the targets' text);
    over every set ``eval/loss`` and ``eval/bpb`` (micro: token-weighted, every target alike), and with
    several sets ``eval/macro_loss`` and ``eval/macro_bpb`` (the sets' mean, each set alike); per tag of
    ``tags`` (a set's tags, by set), over its sets, ``eval/<tag>/micro_loss`` and ``/bpb`` (micro) and
    ``eval/<tag>/macro_loss`` and ``/macro_bpb`` (their mean). A set without a target counts in no mean.

    >>> sums = {"web": BatchSums(jnp.float32(20.0), jnp.float32(10.0), jnp.float32(40.0))}
    >>> {k: round(v, 3) for k, v in summarize(sums, with_bytes=True).items()}
    {'eval/web/loss': 2.0, 'eval/web/bpb': 0.721, 'eval/loss': 2.0, 'eval/bpb': 0.721}
    >>> sums["c4"] = BatchSums(jnp.float32(30.0), jnp.float32(30.0), jnp.float32(90.0))
    >>> metrics = summarize(sums, with_bytes=False, tags={"c4": ["paloma"]})
    >>> [(k, round(v, 3)) for k, v in metrics.items() if "/c4/" not in k and "/web/" not in k]
    [('eval/paloma/micro_loss', 1.0), ('eval/paloma/macro_loss', 1.0), ('eval/loss', 1.25), \
('eval/macro_loss', 1.5)]
    """
    tags = tags or {}
    metrics: dict[str, float] = {}
    sums = {name: _Sums(float(s.loss), float(s.tokens), float(s.bytes)) for name, s in per_set.items()}
    for name, each in sums.items():
        metrics[f"eval/{name}/loss"] = each.loss_per_token
        if with_bytes:
            metrics[f"eval/{name}/bpb"] = each.bits_per_byte
    grouped: dict[str, list[str]] = {}
    for name, names in tags.items():
        for tag in names:
            grouped.setdefault(tag, []).append(name)
    for tag, names in grouped.items():
        tagged = {name: sums[name] for name in names if name in sums}
        metrics.update(_averages(tagged, f"eval/{tag}/", with_bytes, "micro_", macro_from=1))
    return metrics | _averages(sums, "eval/", with_bytes, "", macro_from=2)


@dataclasses.dataclass(frozen=True)
class _Sums:
    loss: float
    tokens: float
    bytes: float

    @property
    def loss_per_token(self) -> float:
        return self.loss / max(self.tokens, 1.0)

    @property
    def bits_per_byte(self) -> float:
        return self.loss / math.log(2) / max(self.bytes, 1.0)


def _averages(
    sums: dict[str, _Sums], prefix: str, with_bytes: bool, micro: str, macro_from: int
) -> dict[str, float]:
    """Over ``sums``' sets: the micro averages (``<prefix><micro>loss``, ``<prefix>bpb``), and with at least
    ``macro_from`` sets the macro ones (``<prefix>macro_loss``, ``<prefix>macro_bpb``: the mean over the sets
    that have targets)."""
    total = _Sums(*(sum(getattr(s, field) for s in sums.values()) for field in ("loss", "tokens", "bytes")))
    out = {f"{prefix}{micro}loss": total.loss_per_token}
    if with_bytes:
        out[f"{prefix}bpb"] = total.bits_per_byte
    counted = [s for s in sums.values() if s.tokens > 0]
    if len(sums) >= macro_from and counted:
        out[f"{prefix}macro_loss"] = sum(s.loss_per_token for s in counted) / len(counted)
        if with_bytes:
            out[f"{prefix}macro_bpb"] = sum(s.bits_per_byte for s in counted) / len(counted)
    return out
