"""The train state (one pytree of named arrays) and the one jitted train step.

The state holds the step counter, the model, the optimizer state, the count of skipped updates and, with
``optimizer.ema``, the moving average of the weights; the data position is the step counter and nothing
else, so a checkpoint of the state is a complete resume point. The step computes the loss and its gradient
(accumulated over microbatches by a scan), applies the optax update and moves the average, and keeps the
old state instead when the loss or the gradient is not finite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.adapters import NamedBatch
from meltemi.trainer.config import EmaConfig, RunConfig
from meltemi.trainer.model.llama import Llama, cast_floating, with_matmul_dtype
from meltemi.trainer.step.norms import ParameterNorms, Watch, watch_due
from meltemi.trainer.step.optimizer import make_optimizer
from meltemi.trainer.step.schedules import learning_rate_schedule


class TrainState(eqx.Module):
    """Everything that changes during training: a checkpoint saves exactly this. ``ema`` is the moving
    average of the weights (``optimizer.ema``; None without one), laid out as ``model`` is."""

    step: jax.Array
    model: Llama
    opt_state: optax.OptState
    skipped_steps: jax.Array
    ema: Llama | None = None

    @property
    def trained(self) -> Llama:
        """The model the run gives: the average of the weights when it keeps one, else the weights."""
        return self.model if self.ema is None else self.ema


class StepMetrics(eqx.Module):
    """What one step reports: the loss without z-loss, the z-loss, the gradient norm, the learning rate
    used, whether the update was applied (False: NaN/Inf, skipped), and each parameter's norms (None when
    ``trainer.watch`` is off; computed on its steps only: ``norms.computed``)."""

    loss: jax.Array
    z_loss: jax.Array
    grad_norm: jax.Array
    learning_rate: jax.Array
    applied: jax.Array
    norms: ParameterNorms | None = None


def init_state(config: RunConfig, key: jax.Array) -> TrainState:
    """A fresh state: the model from ``key`` in the parameter dtype, the optimizer's initial state."""
    model = Llama.init(config.model, key=key)
    model = cast_floating(model, jnp.dtype(config.trainer.param_dtype))
    optimizer = make_optimizer(config.optimizer, model)
    zero = jnp.zeros((), jnp.int32)
    ema = None if config.optimizer.ema is None else copy_weights(model)
    return TrainState(step=zero, model=model, opt_state=optimizer.init(model), skipped_steps=zero, ema=ema)


def copy_weights(model: Llama) -> Llama:
    """``model``'s values in buffers of their own, laid out as they are: what an average starts from (the
    train step donates the state, so the average never shares a buffer with the weights)."""
    return jax.tree_util.tree_map(lambda x: x.copy(), model)


def moved_average(ema: EmaConfig, average: Llama, model: Llama, step: jax.Array) -> Llama:
    """The average after the step from ``step`` to ``step + 1`` made the weights ``model``: ``beta * average
    + (1 - beta) * model`` in float32 (kept in the weights' dtype) once ``step`` reaches ``ema.start_step``,
    before that a copy of ``model`` (Levanter's ``optax.incremental_update`` with step size ``1 - beta``)."""
    started = step >= ema.start_step

    def move(old: jax.Array, new: jax.Array) -> jax.Array:
        moved = ema.beta * old.astype(jnp.float32) + (1.0 - ema.beta) * new.astype(jnp.float32)
        return jnp.where(started, moved.astype(new.dtype), new)

    return jax.tree_util.tree_map(move, average, model)


def _loss_terms(model: Llama, batch: NamedBatch, config: RunConfig, total: jax.Array):
    """This batch's share of the global mean loss (its token sum over ``total``), and of the z-loss."""
    m = config.model
    compute = cast_floating(model, jnp.dtype(config.trainer.compute_dtype))
    compute = with_matmul_dtype(compute, m.matmul_dtype)
    hidden = compute.hidden_states(batch.input_ids, batch.segment_ids, batch.positions)
    mean, lse = adapters.token_losses(
        hidden,
        compute.unembedding(),
        batch.targets,
        batch.loss_mask,
        z_loss_weight=m.z_loss_weight,
        implementation=m.cross_entropy,
        block_size=m.cross_entropy_block_size,
    )
    mask = batch.loss_mask.rearrange((adapters.BATCH, adapters.POSITION)).array
    count = mask.sum(dtype=jnp.float32)
    share = mean * count / jnp.maximum(total, 1.0)
    z_loss = m.z_loss_weight * jnp.sum(jnp.where(mask, jax.lax.stop_gradient(lse) ** 2, 0.0))
    return share, z_loss / jnp.maximum(total, 1.0)


def _microbatches(batch: NamedBatch, count: int) -> NamedBatch:
    """``batch`` as ``count`` microbatches along a leading ``microbatch`` axis.

    Microbatch ``i`` takes rows ``i, i + count, ...``: each device's contiguous rows are spread over every
    microbatch, so the microbatches stay sharded like the batch.
    """

    def split(x: hax.NamedArray) -> hax.NamedArray:
        Batch = x.resolve_axis(adapters.BATCH)
        rest = [a for a in x.axes if a.name != adapters.BATCH]
        raw = x.rearrange((Batch, *rest)).array
        raw = raw.reshape(Batch.size // count, count, *raw.shape[1:]).swapaxes(0, 1)
        return hax.named(raw, (hax.Axis("microbatch", count), Batch.resize(Batch.size // count), *rest))

    return jax.tree_util.tree_map(split, batch, is_leaf=hax.is_named_array)


def make_gradients(
    config: RunConfig,
) -> Callable[[Llama, NamedBatch], tuple[jax.Array, jax.Array, Llama]]:
    """``gradients(model, batch) -> (loss, z_loss, grads)``: the batch's mean loss over its trained targets
    (their summed loss over their count in the whole global batch) and its gradient, accumulated over
    ``trainer.microbatch_size`` rows at a time when set; the same whatever the microbatching or packing."""
    micro_size = config.trainer.microbatch_size
    grad_fn = eqx.filter_value_and_grad(_loss_terms, has_aux=True)

    def gradients(model: Llama, batch: NamedBatch):
        total = batch.loss_mask.array.sum(dtype=jnp.float32)
        rows = batch.input_ids.resolve_axis(adapters.BATCH).size
        if micro_size is None or micro_size >= rows:
            (loss, z_loss), grads = grad_fn(model, batch, config, total)
            return loss, z_loss, grads
        micro = _microbatches(batch, rows // micro_size)
        zeros = jax.tree_util.tree_map(lambda p: jnp.zeros(p.shape, jnp.float32), model)

        def accumulate(carry, one: NamedBatch):
            loss, z_loss, grads = carry
            (part, z), g = grad_fn(model, hax.auto_sharded(one), config, total)
            grads = jax.tree_util.tree_map(lambda a, b: a + b.astype(jnp.float32), grads, g)
            return (loss + part, z_loss + z, grads), None

        start = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), zeros)
        (loss, z_loss, grads), _ = hax.scan(accumulate, "microbatch")(start, micro)
        return loss, z_loss, grads

    return gradients


def make_train_step(
    config: RunConfig, structure: Llama | None = None, z_loss_weight: float | None = None
) -> Callable[..., tuple[TrainState, StepMetrics]]:
    """``train_step(state, batch, schedule=None) -> (state, StepMetrics)``, to be jitted under the compute
    axis mapping; ``structure`` (the model's abstract arrays, traced when not given) is what weight decay is
    masked by; ``z_loss_weight`` the weight this step is compiled with (default: the run's at step 0; a run
    whose weight changes by step compiles one step per weight, since the fused loss takes it as a
    constant). ``schedule`` is what the schedule gives the step (``step_schedule(config)`` at
    ``state.step``, as the trainer's program passes it, so that one step serves runs of every length and
    schedule); None computes it inside the step."""
    weight = config.model.z_loss_at(0) if z_loss_weight is None else z_loss_weight
    config = config.model_copy(update={"model": config.model.model_copy(update={"z_loss_weight": weight})})
    structure = _structure_model(config) if structure is None else structure
    optimizer = make_optimizer(config.optimizer, structure)
    gradients = make_gradients(config)
    watch = Watch(config.trainer.watch)

    def train_step(
        state: TrainState, batch: NamedBatch, schedule: StepSchedule | None = None
    ) -> tuple[TrainState, StepMetrics]:
        if schedule is None:
            schedule = step_schedule(config)(state.step)
        rate, due = schedule  # the one rate: applied here, reported in the metrics
        loss, z_loss, grads = gradients(state.model, batch)
        grads = cast_floating(grads, jnp.dtype(config.trainer.param_dtype))
        grad_norm = optax.tree.norm(grads)
        grad_norms = watch.norms("grads", grads, due)  # each tree's norms where it is made
        updates, opt_state = optimizer.update(grads, state.opt_state, state.model, learning_rate=rate)
        update_norms = watch.norms("updates", updates, due)
        model = optax.apply_updates(state.model, updates)
        applied = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        keep = lambda new, old: jnp.where(applied, new, old)  # noqa: E731
        ema = None
        if state.ema is not None:  # moved by the weights the step made; a skipped step keeps it
            ema = moved_average(config.optimizer.ema, state.ema, model, state.step)
            ema = jax.tree_util.tree_map(keep, ema, state.ema)
        new_state = TrainState(
            step=state.step + 1,
            model=jax.tree_util.tree_map(keep, model, state.model),
            opt_state=jax.tree_util.tree_map(keep, opt_state, state.opt_state),
            skipped_steps=state.skipped_steps + (~applied).astype(jnp.int32),
            ema=ema,
        )
        params_norms = watch.norms("params", new_state.model, due)
        norms = watch.record(
            due, params=params_norms, grads=grad_norms, updates=update_norms, applied=applied
        )
        metrics = StepMetrics(loss - z_loss, z_loss, grad_norm, rate, applied, norms)
        return new_state, metrics

    return train_step


class StepSchedule(NamedTuple):
    """What the run's schedule gives one step: its learning rate (float32) and whether it computes the norms
    it watches (``trainer.watch``: every ``every`` steps, and the last)."""

    rate: jax.Array
    watch_due: jax.Array


def step_schedule(config: RunConfig) -> Callable[[jax.Array], StepSchedule]:
    """The schedule of ``config`` at a step (``step.schedules`` for the rate): the train step's only inputs
    that depend on the run's length and rates.

    >>> from meltemi.trainer.config import RunConfig
    >>> config = RunConfig(trainer={"num_train_steps": 5, "watch": {"every": 2}})
    >>> [bool(step_schedule(config)(step).watch_due) for step in range(5)]
    [False, True, False, True, True]
    """
    rate = learning_rate_schedule(config.optimizer, config.trainer.num_train_steps)
    due = watch_due(config.trainer.watch, config.trainer.num_train_steps)
    return lambda step: StepSchedule(rate(step), due(step))


def _structure_model(config: RunConfig) -> Llama:
    """The model's structure (abstract arrays): what the weight-decay mask is computed from."""
    return eqx.filter_eval_shape(Llama.init, config.model, key=jax.random.key(0))
