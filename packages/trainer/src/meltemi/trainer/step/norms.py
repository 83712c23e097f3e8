"""The norm of each parameter, its gradient and its update, computed inside the train step (Levanter's
"watch", ``trainer.watch``): what shows a layer going wrong long before the loss does (Marin found its
``lm_head`` blowing up through them).

Each named array of the model gets its Frobenius norm, in float32; a parameter of the stacked decoder blocks
gets one per layer (``per_layer``, as Levanter's ``split_scan_layers``), else one over the stack. The step
carries them as a ``ParameterNorms``: trees shaped like the model, each parameter replaced by its norm
(named on the host, never in the step). The names are Levanter's: the parameter's path in the model, the
layer's index where the stack is (Hugging Face's names without ``model.``), under ``params/norm/``,
``grad/norm/`` and ``updates/norm/``, each with a ``total`` over the whole model:

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> model = Llama.init(ModelConfig(vocab_size=16, hidden_dim=8, intermediate_dim=16, num_layers=2,
...                                num_heads=2, num_kv_heads=1), key=jax.random.key(0))
>>> norms = tree_norms(model, per_layer=True)
>>> norms.layers.stacked.mlp.up_proj.weight.shape, norms.lm_head.weight.shape
((2,), ())
>>> names = list(named_norms(norms, "params"))
>>> names[:2], names[-3:]
(['params/norm/embed_tokens.weight', 'params/norm/layers.0.self_attn.q_proj.weight'], \
['params/norm/norm.weight', 'params/norm/lm_head.weight', 'params/norm/total'])
>>> norm_group("params/norm/layers.1.mlp.up_proj.weight")
('params', 'layers.mlp.up_proj.weight')

The gradient's norms are of the gradient before clipping (its total is ``train/grad_norm``); the updates'
are of what the step added to the parameters (after clipping, Adam, weight decay and the learning rate;
zero for a skipped step), the parameters' those of the parameters after the step (the state the logged step
names). They are computed only on the steps they are logged at (``Watch``: a ``lax.cond`` on the step where
each tree is made), so the others pay nothing for them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
import haliax_lite.nn as hnn
from meltemi.trainer.config import WatchConfig

PREFIXES = {"params": "params", "grads": "grad", "updates": "updates"}
"""Each watched tree's metric prefix (Levanter's: ``grad``, not ``grads``)."""
TOTAL = "total"


class ParameterNorms(eqx.Module):
    """One step's norms: ``params``, ``grads`` and ``updates`` are trees shaped like the model, each named
    array replaced by its norm (a float32 scalar, or one per layer for the stacked blocks), None when not
    watched; ``computed`` says whether this step computed them (else they are zeros, not to be logged)."""

    computed: jax.Array
    params: Any = None
    grads: Any = None
    updates: Any = None

    def named(self) -> dict[str, float]:
        """Every norm by its metric name (``params/norm/lm_head.weight``, ..., ``grad/norm/total``), from
        host values (``jax.device_get`` of the step's metrics)."""
        named: dict[str, float] = {}
        for target, prefix in PREFIXES.items():
            tree = getattr(self, target)
            if tree is not None:
                named.update(named_norms(tree, prefix))
        return named


def _norm(x: hax.NamedArray, keep: str | None = None) -> jax.Array:
    """The Frobenius norm of ``x`` in float32, over every axis but ``keep`` (when ``x`` has it)."""
    over = tuple(i for i, axis in enumerate(x.axes) if axis.name != keep)
    return jnp.sqrt(jnp.sum(jnp.square(x.array.astype(jnp.float32)), axis=over))


def _is_node(x) -> bool:
    return isinstance(x, hnn.Stacked) or hax.is_named_array(x)


def tree_norms(tree, per_layer: bool = True):
    """``tree`` (a model, its gradient or its update) with each named array replaced by its norm: one per
    layer (along the stack's ``Block`` axis) for the arrays of a ``Stacked`` when ``per_layer``."""

    def one(node):
        if isinstance(node, hnn.Stacked):
            keep = node.Block.name if per_layer else None
            inner = jax.tree_util.tree_map(lambda x: _norm(x, keep), node.stacked, is_leaf=hax.is_named_array)
            return eqx.tree_at(lambda s: s.stacked, node, inner)
        return _norm(node)

    return jax.tree_util.tree_map(one, tree, is_leaf=_is_node)


class Watch:
    """``trainer.watch`` inside the train step: each watched tree's norms, computed where the step makes the
    tree (a ``lax.cond`` there on whether the step is due, so no tree lives longer for them), and the step's
    ``ParameterNorms``. A step is due when the step it ends at is a multiple of ``every``, or the last.

    One ``lax.cond`` at the step's end, over all three trees, kept the gradient and the update alive until
    it: on the CPU plan of a 160M-parameter model, 395 MB more temporaries (62% of the parameters' bytes);
    computing them on every step without a cond, 138 MB; a cond at each tree, 13 MB."""

    def __init__(self, config: WatchConfig):
        self.config = config

    def norms(self, target: str, tree, due: jax.Array):
        """``tree_norms`` of ``tree`` when the step is ``due`` (``watch_due``; zeros otherwise), or None when
        ``target`` (``params``, ``grads``, ``updates``) is not watched."""
        if not self.config.on or target not in self.config.targets:
            return None
        compute = lambda: tree_norms(tree, self.config.per_layer)  # noqa: E731
        shapes = jax.eval_shape(compute)
        zeros = lambda: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)  # noqa: E731
        return jax.lax.cond(due, compute, zeros)

    def record(self, due: jax.Array, *, params, grads, updates, applied: jax.Array) -> ParameterNorms | None:
        """The step's ``ParameterNorms`` from its ``norms`` (the updates' zeroed unless ``applied``: a skipped
        step applied nothing, and its update may be NaN), or None when the watch is off."""
        if not self.config.on:
            return None
        if updates is not None:
            updates = jax.tree_util.tree_map(lambda n: jnp.where(applied, n, 0.0), updates)
        return ParameterNorms(due, params, grads, updates)


def watch_due(config: WatchConfig, num_train_steps: int) -> Callable[[jax.Array], jax.Array]:
    """Whether the step from ``step`` to ``step + 1`` computes the norms: it ends at a multiple of
    ``every``, or at the run's last step (a bool; traced inside a program).

    >>> due = watch_due(WatchConfig(every=2), num_train_steps=5)
    >>> [bool(due(step)) for step in range(5)]
    [False, True, False, True, True]
    """

    def due(step: jax.Array) -> jax.Array:
        done = jnp.asarray(step) + 1
        return (done % max(config.every, 1) == 0) | (done == num_train_steps)

    return due


def _key_name(key) -> str:
    for field in ("name", "key", "idx"):
        if hasattr(key, field):
            return str(getattr(key, field))
    return str(key)


def _path_name(path) -> str:
    return ".".join(_key_name(k) for k in path)


def named_norms(norms, prefix: str) -> dict[str, float]:
    """A ``tree_norms`` tree's norms (host values) by name, under ``<prefix>/norm/``, in the model's order,
    and their ``total`` (the norm of the whole tree)."""
    named: dict[str, float] = {}
    stacked = lambda x: isinstance(x, hnn.Stacked)  # noqa: E731
    for path, node in jax.tree_util.tree_flatten_with_path(norms, is_leaf=stacked)[0]:
        name = _path_name(path)
        if not isinstance(node, hnn.Stacked):
            named[name] = float(np.asarray(node))
            continue
        for inner, value in jax.tree_util.tree_flatten_with_path(node.stacked)[0]:
            value = np.asarray(value)
            if value.ndim == 0:  # one over the stack
                named[f"{name}.{_path_name(inner)}"] = float(value)
            else:
                for layer, v in enumerate(value.tolist()):
                    named[f"{name}.{layer}.{_path_name(inner)}"] = float(v)
    total = math.sqrt(sum(v * v for v in named.values()))
    return {**{f"{prefix}/norm/{k}": v for k, v in named.items()}, f"{prefix}/norm/{TOTAL}": total}


_LAYER = re.compile(r"\.\d+(?=\.)")


def norm_group(metric: str) -> tuple[str, str] | None:
    """The watched tree's prefix and the layer group of a norm's metric name (a layer's index dropped:
    every layer's ``up_proj`` is one group), or None for another metric."""
    prefix, sep, name = metric.partition("/norm/")
    if not sep or prefix not in PREFIXES.values():
        return None
    return prefix, _LAYER.sub("", name, count=1)


def group_norms(record: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """One ``metrics.jsonl`` record's norms by prefix and layer group: a group's layers combined (the norm
    over the stack, as ``per_layer: false`` reports it).

    >>> group_norms({"step": 10, "grad/norm/layers.0.w": 3.0, "grad/norm/layers.1.w": 4.0, "train/loss": 2.0})
    {'grad': {'layers.w': 5.0}}
    """
    squares: dict[str, dict[str, float]] = {}
    for metric, value in record.items():
        group = norm_group(metric)
        if group is None or not isinstance(value, float | int):
            continue
        prefix, name = group
        by_name = squares.setdefault(prefix, {})
        by_name[name] = by_name.get(name, 0.0) + float(value) ** 2
    return {prefix: {k: math.sqrt(v) for k, v in names.items()} for prefix, names in squares.items()}
