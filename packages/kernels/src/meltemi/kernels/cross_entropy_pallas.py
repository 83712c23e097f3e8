"""Cross-entropy with a Pallas kernel per logits tile (Triton backend on GPU; interpreted elsewhere).

The vocabulary is walked in chunks as in ``cross_entropy_xla``. For each chunk one Pallas call computes
``[block_tokens, block_vocab]`` logit tiles (a matmul looping over the embedding in ``block_embed`` slices)
and reduces them on chip: the forward writes only per-tile max, sum of exponentials and label logit, so
logits never reach memory; the backward writes the chunk's ``d_logits``, which XLA multiplies into
``d_hidden`` and the chunk's slice of ``d_unembedding``.

A ``[chunk]`` column bias of 0 or -inf tells the kernel which columns count: it hides columns past the
vocabulary and columns an earlier (overlapping) chunk already covered, so the unembedding is never
copied or padded whole. Labels arrive relative to the chunk (-1 when not in it).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from meltemi.kernels._blocking import pad_axis, round_up
from meltemi.kernels._pallas_launch import Launcher, check_launch_settings, fit_tile


@dataclasses.dataclass(frozen=True)
class PallasCrossEntropyConfig:
    """Tile sizes (powers of two, at least 16) and launch settings; ``interpret=None`` interprets off GPU."""

    block_tokens: int = 64
    block_vocab: int = 128
    block_embed: int = 64
    num_warps: int = 4
    num_stages: int = 2
    interpret: bool | None = None

    def __post_init__(self) -> None:
        check_launch_settings(
            "PallasCrossEntropyConfig",
            self.num_warps,
            self.num_stages,
            block_tokens=self.block_tokens,
            block_vocab=self.block_vocab,
            block_embed=self.block_embed,
        )


@dataclasses.dataclass(frozen=True)
class _Plan:
    z_loss_weight: float
    vocab: int
    chunk: int
    block_tokens: int
    block_vocab: int
    block_embed: int
    launcher: Launcher

    @property
    def num_chunks(self) -> int:
        return -(-self.vocab // self.chunk)

    def launch(self, kernel, tokens: int, **kwargs):
        grid = (tokens // self.block_tokens, self.chunk // self.block_vocab)
        return self.launcher(kernel, grid=grid, **kwargs)


def pallas_cross_entropy(
    hidden: jax.Array,
    unembedding: jax.Array,
    labels: jax.Array,
    weights: jax.Array,
    z_loss_weight: float,
    *,
    block_size: int = 4096,
    config: PallasCrossEntropyConfig = PallasCrossEntropyConfig(),
) -> tuple[jax.Array, jax.Array]:
    """Cross-entropy by Pallas tiles, same contract as ``reference_cross_entropy``.

    >>> import jax.numpy as jnp
    >>> loss, lse = pallas_cross_entropy(jnp.zeros((2, 3)), jnp.zeros((3, 5)), jnp.array([0, 4]),
    ...                                  jnp.full((2,), 0.5), 0.0)
    >>> round(float(loss), 4), lse.shape
    (1.6094, (2,))
    """
    tokens, embed = hidden.shape
    vocab = unembedding.shape[1]
    block_vocab = fit_tile(config.block_vocab, vocab)
    chunk = min(round_up(block_size, block_vocab), round_up(vocab, block_vocab))
    if chunk > vocab:
        unembedding = pad_axis(unembedding, chunk, axis=1)
    block_tokens = fit_tile(config.block_tokens, tokens)
    block_embed = fit_tile(config.block_embed, embed)
    plan = _Plan(
        z_loss_weight=float(z_loss_weight),
        vocab=vocab,
        chunk=chunk,
        block_tokens=block_tokens,
        block_vocab=block_vocab,
        block_embed=block_embed,
        launcher=Launcher.resolve(config.num_warps, config.num_stages, config.interpret),
    )
    padded_tokens = round_up(tokens, block_tokens)
    padded_embed = round_up(embed, block_embed)
    hidden_p = pad_axis(pad_axis(hidden, padded_tokens, axis=0), padded_embed, axis=1)
    labels_p = pad_axis(labels.astype(jnp.int32), padded_tokens, axis=0, value=-1)
    weights_p = pad_axis(weights.astype(jnp.float32), padded_tokens, axis=0)
    loss, lse = _fused(plan, hidden_p, unembedding, labels_p, weights_p)
    return loss, lse[:tokens]


def _chunk_inputs(plan: _Plan, unembedding, labels, c):
    """Chunk ``c``'s columns (embedding padded like the hidden states), column bias and local labels."""
    start = jnp.minimum(c * plan.chunk, unembedding.shape[1] - plan.chunk)
    columns = lax.dynamic_slice_in_dim(unembedding, start, plan.chunk, axis=1)
    global_columns = start + jnp.arange(plan.chunk)
    counts = (global_columns >= c * plan.chunk) & (global_columns < plan.vocab)
    bias = jnp.where(counts, 0.0, -jnp.inf).astype(jnp.float32)
    local_labels = jnp.where(labels >= c * plan.chunk, labels - start, -1)
    return start, columns, bias, local_labels


def _logit_tile(plan: _Plan, hidden_ref, columns_ref, bias_ref, labels_ref):
    """One ``[block_tokens, block_vocab]`` logits tile (non-counting columns at -inf) and its label mask."""

    def step(e, acc):
        start = pl.multiple_of(e * plan.block_embed, plan.block_embed)
        h = hidden_ref[:, pl.ds(start, plan.block_embed)]
        w = columns_ref[pl.ds(start, plan.block_embed), :]
        return acc + lax.dot_general(h, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)

    num_embed_blocks = hidden_ref.shape[1] // plan.block_embed
    acc = jnp.zeros((plan.block_tokens, plan.block_vocab), jnp.float32)
    logits = lax.fori_loop(0, num_embed_blocks, step, acc) + bias_ref[...][None, :]
    local_columns = pl.program_id(1) * plan.block_vocab + jnp.arange(plan.block_vocab)
    is_label = local_columns[None, :] == labels_ref[...][:, None]
    return logits, is_label


def _statistics_kernel(plan, hidden_ref, columns_ref, bias_ref, labels_ref, max_ref, sum_ref, label_ref):
    logits, is_label = _logit_tile(plan, hidden_ref, columns_ref, bias_ref, labels_ref)
    tile_max = jnp.max(logits, axis=1)
    shift = jnp.where(tile_max == -jnp.inf, 0.0, tile_max)
    max_ref[...] = tile_max
    sum_ref[...] = jnp.sum(jnp.exp(logits - shift[:, None]), axis=1)
    label_ref[...] = jnp.sum(jnp.where(is_label, logits, 0.0), axis=1)


def _d_logits_kernel(
    plan, hidden_ref, columns_ref, bias_ref, labels_ref, lse_ref, d_lse_ref, coef_ref, out_ref
):
    logits, is_label = _logit_tile(plan, hidden_ref, columns_ref, bias_ref, labels_ref)
    d_logits = jnp.exp(logits - lse_ref[...][:, None]) * d_lse_ref[...][:, None]
    out_ref[...] = (d_logits - jnp.where(is_label, coef_ref[...][:, None], 0.0)).astype(out_ref.dtype)


def _specs(plan: _Plan, embed: int, extra_rows: int):
    bt, bv = plan.block_tokens, plan.block_vocab
    rows = pl.BlockSpec((bt,), lambda i, j: (i,))
    return [
        pl.BlockSpec((bt, embed), lambda i, j: (i, 0)),
        pl.BlockSpec((embed, bv), lambda i, j: (0, j)),
        pl.BlockSpec((bv,), lambda i, j: (j,)),
        rows,
    ] + [rows] * extra_rows


def _chunk_statistics(plan: _Plan, hidden, columns, bias, local_labels):
    tokens, embed = hidden.shape
    tiles = plan.chunk // plan.block_vocab
    stat = pl.BlockSpec((None, plan.block_tokens), lambda i, j: (j, i))
    shape = jax.ShapeDtypeStruct((tiles, tokens), jnp.float32)
    return plan.launch(
        functools.partial(_statistics_kernel, plan),
        tokens,
        in_specs=_specs(plan, embed, 0),
        out_specs=[stat, stat, stat],
        out_shape=[shape, shape, shape],
        name="meltemi_cross_entropy_statistics",
    )(hidden, columns, bias, local_labels)


def _forward(plan: _Plan, hidden, unembedding, labels):
    embed = hidden.shape[1]

    def step(carry, c):
        row_max, sum_exp, label_logit = carry
        _, columns, bias, local_labels = _chunk_inputs(plan, unembedding, labels, c)
        columns = pad_axis(columns, embed, axis=0)
        tile_max, tile_sum, tile_label = _chunk_statistics(plan, hidden, columns, bias, local_labels)
        new_max = jnp.maximum(row_max, tile_max.max(axis=0))
        safe_max = jnp.where(new_max == -jnp.inf, 0.0, new_max)
        rescaled = tile_sum * jnp.exp(jnp.where(tile_max == -jnp.inf, 0.0, tile_max) - safe_max)
        sum_exp = sum_exp * jnp.exp(row_max - safe_max) + jnp.where(tile_max == -jnp.inf, 0.0, rescaled).sum(
            0
        )
        return (new_max, sum_exp, label_logit + tile_label.sum(axis=0)), None

    tokens = hidden.shape[0]
    init = (
        jnp.full((tokens,), -jnp.inf, jnp.float32),
        jnp.zeros((tokens,), jnp.float32),
        jnp.zeros((tokens,), jnp.float32),
    )
    (row_max, sum_exp, label_logit), _ = lax.scan(step, init, jnp.arange(plan.num_chunks))
    return row_max + jnp.log(sum_exp), label_logit


def _loss(plan, lse, label_logit, weights):
    return jnp.sum(weights * (lse - label_logit + plan.z_loss_weight * jnp.square(lse)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(plan, hidden, unembedding, labels, weights):
    lse, label_logit = _forward(plan, hidden, unembedding, labels)
    return _loss(plan, lse, label_logit, weights), lse


def _fused_fwd(plan, hidden, unembedding, labels, weights):
    lse, label_logit = _forward(plan, hidden, unembedding, labels)
    return (_loss(plan, lse, label_logit, weights), lse), (hidden, unembedding, labels, weights, lse)


def _fused_bwd(plan, residuals, cotangents):
    hidden, unembedding, labels, weights, lse = residuals
    d_loss, d_lse_direct = cotangents
    coefficient = d_loss * weights
    d_lse = coefficient * (1.0 + 2.0 * plan.z_loss_weight * lse) + d_lse_direct
    tokens, embed = hidden.shape
    true_embed = unembedding.shape[0]

    def step(carry, c):
        d_hidden, d_unembedding = carry
        start, columns, bias, local_labels = _chunk_inputs(plan, unembedding, labels, c)
        padded_columns = pad_axis(columns, embed, axis=0)
        d_logits = plan.launch(
            functools.partial(_d_logits_kernel, plan),
            tokens,
            in_specs=_specs(plan, embed, 3),
            out_specs=pl.BlockSpec((plan.block_tokens, plan.block_vocab), lambda i, j: (i, j)),
            out_shape=jax.ShapeDtypeStruct((tokens, plan.chunk), hidden.dtype),
            name="meltemi_cross_entropy_d_logits",
        )(hidden, padded_columns, bias, local_labels, lse, d_lse, coefficient)
        d_hidden = d_hidden + jnp.dot(d_logits, padded_columns.T, preferred_element_type=jnp.float32)
        d_columns = jnp.dot(hidden[:, :true_embed].T, d_logits, preferred_element_type=jnp.float32)
        previous = lax.dynamic_slice_in_dim(d_unembedding, start, plan.chunk, axis=1)
        d_columns = jnp.where(bias[None, :] == 0, d_columns.astype(unembedding.dtype), previous)
        return (d_hidden, lax.dynamic_update_slice_in_dim(d_unembedding, d_columns, start, axis=1)), None

    init = (jnp.zeros(hidden.shape, jnp.float32), jnp.zeros_like(unembedding))
    (d_hidden, d_unembedding), _ = lax.scan(step, init, jnp.arange(plan.num_chunks))
    return d_hidden.astype(hidden.dtype), d_unembedding, None, None


_fused.defvjp(_fused_fwd, _fused_bwd)
