"""AdamW as the config says: global-norm clipping, Adam moments, decoupled weight decay, the schedule.

Weight decay skips embeddings and norm scales unless ``optimizer.decay_embeddings_and_norms`` is set (the
usual choice: decaying a norm's scale pulls it towards 0, not towards a prior).

>>> import jax
>>> from meltemi.trainer.config import ModelConfig, OptimizerConfig
>>> from meltemi.trainer.llama import Llama
>>> model = Llama.init(ModelConfig(vocab_size=16, hidden_dim=8, intermediate_dim=16, num_layers=1,
...                                num_heads=2, num_kv_heads=1), key=jax.random.key(0))
>>> mask = weight_decay_mask(model, OptimizerConfig())
>>> mask.embed_tokens.weight, mask.norm.weight, mask.layers.stacked.mlp.up_proj.weight
(False, False, True)
"""

from __future__ import annotations

import equinox as eqx
import jax
import optax

import haliax_lite as hax
from meltemi.trainer.config import OptimizerConfig
from meltemi.trainer.schedules import learning_rate_schedule


def weight_decay_mask(model: eqx.Module, config: OptimizerConfig):
    """A tree like ``model`` with a bool for each parameter (named array): whether it is decayed."""

    def decayed(path, leaf):
        if not isinstance(leaf, hax.NamedArray):
            return False
        names = [getattr(p, "name", "") for p in path]
        return config.decay_embeddings_and_norms or not any(
            n == "embed_tokens" or n.endswith("norm") for n in names
        )

    return jax.tree_util.tree_map_with_path(decayed, model, is_leaf=hax.is_named_array)


def make_optimizer(
    config: OptimizerConfig, num_steps: int, model: eqx.Module
) -> optax.GradientTransformation:
    """The optax transformation for ``model``'s parameters over a run of ``num_steps``."""
    parts = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm is not None else []
    parts += [
        optax.scale_by_adam(b1=config.beta1, b2=config.beta2, eps=config.epsilon),
        optax.add_decayed_weights(config.weight_decay, mask=weight_decay_mask(model, config)),
        optax.scale_by_learning_rate(learning_rate_schedule(config, num_steps)),
    ]
    return optax.chain(*parts)
