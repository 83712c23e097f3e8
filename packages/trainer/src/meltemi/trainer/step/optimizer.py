"""AdamW as the config says: global-norm clipping, Adam moments, decoupled weight decay, scaled by the rate.

The learning rate is an argument of each update (``optimizer.update(grads, state, params,
learning_rate=rate)``), not a count kept in the optimizer's state: the train step computes it from the train
state's step, logs that value and applies the same one. One counter drives both, so a skipped step (whose
optimizer state is thrown away) and a new phase that resets the step (``initialize_from.reset_step``) move
the schedule exactly as they move the step.

Weight decay skips embeddings and norm scales unless ``optimizer.decay_embeddings_and_norms`` is set (the
usual choice: decaying a norm's scale pulls it towards 0, not towards a prior).

>>> import jax
>>> from meltemi.trainer.config import ModelConfig, OptimizerConfig
>>> from meltemi.trainer.model.llama import Llama
>>> model = Llama.init(ModelConfig(vocab_size=16, hidden_dim=8, intermediate_dim=16, num_layers=1,
...                                num_heads=2, num_kv_heads=1), key=jax.random.key(0))
>>> mask = weight_decay_mask(model, OptimizerConfig())
>>> mask.embed_tokens.weight, mask.norm.weight, mask.layers.stacked.mlp.up_proj.weight
(False, False, True)
>>> sgd = scale_by_learning_rate_argument()
>>> sgd.update({"w": jnp.ones(2)}, sgd.init(None), learning_rate=0.5)[0]["w"].tolist()
[-0.5, -0.5]
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import haliax_lite as hax
from meltemi.trainer.config import OptimizerConfig


def weight_decay_mask(model: eqx.Module, config: OptimizerConfig) -> eqx.Module:
    """A tree like ``model`` with a bool for each parameter (named array): whether it is decayed."""

    def decayed(path, leaf):
        if not isinstance(leaf, hax.NamedArray):
            return False
        names = [getattr(p, "name", "") for p in path]
        return config.decay_embeddings_and_norms or not any(
            n == "embed_tokens" or n.endswith("norm") for n in names
        )

    return jax.tree_util.tree_map_with_path(decayed, model, is_leaf=hax.is_named_array)


def scale_by_learning_rate_argument() -> optax.GradientTransformationExtraArgs:
    """Scale the updates by minus the ``learning_rate`` each update is given (keeps no state)."""

    def init(params):
        del params
        return optax.EmptyState()

    def update(updates, state, params=None, *, learning_rate, **extra):
        del params, extra
        scaled = jax.tree_util.tree_map(lambda g: jnp.array(-learning_rate, dtype=g.dtype) * g, updates)
        return scaled, state

    return optax.GradientTransformationExtraArgs(init, update)


def make_optimizer(config: OptimizerConfig, model: eqx.Module) -> optax.GradientTransformationExtraArgs:
    """The optax transformation for ``model``'s parameters; each update takes ``learning_rate=``."""
    parts = [optax.clip_by_global_norm(config.max_grad_norm)] if config.max_grad_norm is not None else []
    parts += [
        optax.scale_by_adam(b1=config.beta1, b2=config.beta2, eps=config.epsilon),
        optax.add_decayed_weights(config.weight_decay, mask=weight_decay_mask(model, config)),
        scale_by_learning_rate_argument(),
    ]
    return optax.chain(*parts)
