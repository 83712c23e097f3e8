"""A model's vocabulary grown by new rows: the embedding (and an untied output matrix) gain one row per new
token, each the mean of the rows it had.

A new token starts where the model's tokens are on average, as the anchors initialise them: a row of
zeros, or a fresh draw at the initial scale, would sit far below every trained row in norm (Levanter's
report of ``<|eot_id|>`` having the smallest embedding norm of the vocabulary), and its first logits would
be far from every other token's.

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=8, hidden_dim=16, num_layers=1, num_heads=2, num_kv_heads=1)
>>> model = Llama.init(config, key=jax.random.key(0))
>>> grown = grow_vocabulary(model, config.model_copy(update={"vocab_size": 10}))
>>> grown.embed_tokens.weight.axes[0], bool(jax.numpy.allclose(grown.embed_tokens.weight.array[9],
...                                                            model.embed_tokens.weight.array.mean(0)))
(Axis(name='vocab', size=10), True)
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax.numpy as jnp

import haliax_lite as hax
import haliax_lite.nn as hnn
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.model.llama import Llama


def _grown(table: hax.NamedArray, rows: int) -> hax.NamedArray:
    """``table`` (vocab, embed) with ``rows`` more rows, each the mean of the existing ones."""
    Vocab = table.resolve_axis("vocab")
    raw = table.rearrange(("vocab", "embed")).array
    mean = raw.astype(jnp.float32).mean(axis=0, keepdims=True).astype(raw.dtype)
    grown = jnp.concatenate([raw, jnp.repeat(mean, rows, axis=0)], axis=0)
    return hax.named(grown, (Vocab.resize(Vocab.size + rows), table.resolve_axis("embed")))


def grow_vocabulary(model: Llama, config: ModelConfig) -> Llama:
    """``model`` with ``config.vocab_size`` rows (its own and then the new ones, each the mean of its own)
    and ``config`` as its config."""
    rows = config.vocab_size - model.config.vocab_size
    if rows < 0:
        raise ConfigError(
            f"model.vocab_size: the base has {model.config.vocab_size} rows, the config {config.vocab_size}; "
            "a vocabulary can grow, never shrink"
        )
    table = _grown(model.embed_tokens.weight, rows)
    embedding = hnn.Embedding(table, table.resolve_axis("vocab"), model.embed_tokens.Embed)
    head = model.lm_head
    if head is not None:
        weight = _grown(head.weight, rows)
        head = eqx.tree_at(lambda h: h.weight, head, weight)
        head = dataclasses.replace(head, Out=weight.resolve_axis("vocab"))
    return Llama(embedding, model.layers, model.norm, head, config)
