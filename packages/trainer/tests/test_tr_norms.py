"""trainer.watch: each parameter's, gradient's and update's norm, computed inside the train step, against the
same norms computed outside it; the names; the cadence in metrics.jsonl; and norms.png."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.trainer import adapters
from meltemi.trainer.model.llama import cast_floating
from meltemi.trainer.run.trackers import read_metrics
from meltemi.trainer.step.norms import group_norms
from meltemi.trainer.step.train_step import init_state, make_gradients, make_train_step
from meltemi.trainer.trainer import Trainer


def first_batch(trainer):
    return adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(0)))


def initial_state(config):
    """The step-0 state, jitted as the trainer makes it (eagerly, each op of the init compiled on its own)."""
    return jax.jit(partial(init_state, config))(adapters.jax_key(0, "init"))


def outside_norms(tree, prefix: str, per_layer: bool = True) -> dict[str, float]:
    """The norms of ``tree``'s named arrays computed with numpy, named as the watch names them: HF's name of
    each parameter (``layers.<i>.`` for a layer of the stack), under ``<prefix>/norm/``."""
    norms = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=hax.is_named_array)[0]:
        names = [k.name for k in path]
        array = np.asarray(leaf.array, np.float64)
        if "stacked" in names:
            at = names.index("stacked")
            layers = [a.name for a in leaf.axes].index("layers")
            per = np.sqrt((np.moveaxis(array, layers, 0) ** 2).reshape(array.shape[layers], -1).sum(axis=1))
            if per_layer:
                for i, value in enumerate(per):
                    norms[".".join([*names[:at], str(i), *names[at + 1 :]])] = value
            else:
                norms[".".join(names[:at] + names[at + 1 :])] = np.sqrt((per**2).sum())
        else:
            norms[".".join(names)] = np.sqrt((array**2).sum())
    norms["total"] = np.sqrt(sum(v**2 for v in norms.values()))
    return {f"{prefix}/norm/{k}": v for k, v in norms.items()}


def check_close(reported: dict[str, float], expected: dict[str, float], rtol: float, atol: float = 0.0):
    assert reported.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_allclose(reported[name], value, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("per_layer", [True, False])
def test_the_steps_norms_are_those_of_the_new_parameters_the_gradient_and_the_update(
    make_config, run_dir, per_layer
):
    config = make_config(
        "--trainer.watch.every", "1", "--trainer.watch.per_layer", str(per_layer).lower(),
        "--optimizer.max_grad_norm", "0.1",
    )  # fmt: skip
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    batch = first_batch(trainer)
    before = initial_state(config)
    after, metrics = jax.jit(make_train_step(config))(before, batch)
    assert bool(metrics.applied) and bool(metrics.norms.computed)
    reported = jax.device_get(metrics.norms).named()

    _, _, grads = jax.jit(make_gradients(config))(before.model, batch)  # one program, not op by op
    grads = cast_floating(grads, jnp.float32)
    update = jax.tree_util.tree_map(lambda new, old: new - old, after.model, before.model)
    expected = {
        **outside_norms(after.model, "params", per_layer),
        **outside_norms(grads, "grad", per_layer),
        **outside_norms(update, "updates", per_layer),
    }
    check_close(reported, expected, rtol=2e-5)
    # every parameter is named, each layer of the stack on its own (or the stack as one)
    stacked = [f"self_attn.{p}_proj" for p in "qkvo"] + [f"mlp.{p}_proj" for p in ("gate", "up", "down")]
    stacked += ["input_layernorm", "post_attention_layernorm"]
    layers = [f"layers.{i}." for i in range(2)] if per_layer else ["layers."]
    leaves = ["embed_tokens", "norm", "lm_head"] + [f"{at}{name}" for at in layers for name in stacked]
    assert {k.removeprefix("params/norm/") for k in reported if k.startswith("params/")} == {
        *(f"{leaf}.weight" for leaf in leaves),
        "total",
    }
    # the gradient's are before clipping (to 0.1 here): their total is the step's grad_norm
    np.testing.assert_allclose(reported["grad/norm/total"], float(metrics.grad_norm), rtol=1e-5)
    assert float(metrics.grad_norm) > 0.2


def test_steps_off_the_cadence_compute_nothing_and_a_skipped_update_is_zero(make_config, run_dir):
    config = make_config("--trainer.watch.every", "2", "--trainer.watch.targets", "[grads, updates]")
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    batch = first_batch(trainer)
    step = jax.jit(make_train_step(config))
    state, metrics = step(initial_state(config), batch)  # ends at step 1
    assert not bool(metrics.norms.computed) and metrics.norms.params is None
    assert all(v == 0.0 for v in jax.device_get(metrics.norms).named().values())
    weight = state.model.embed_tokens.weight
    poisoned = jax.tree_util.tree_map(
        lambda x: weight.array.at[:].set(jnp.nan) if x is weight.array else x,
        state,
        is_leaf=lambda x: x is weight.array,
    )
    _, metrics = step(poisoned, batch)  # ends at step 2: due, but skipped
    named = jax.device_get(metrics.norms).named()
    assert bool(metrics.norms.computed) and not bool(metrics.applied)
    assert np.isnan(named["grad/norm/embed_tokens.weight"])
    assert {v for k, v in named.items() if k.startswith("updates/")} == {0.0}


def test_a_run_logs_the_norms_every_n_steps_and_at_the_end_and_plots_them(make_config, run_dir):
    config = make_config(
        "--trainer.num_train_steps", "7", "--trainer.log_every", "2", "--trainer.watch.every", "3",
        "--trainer.checkpoint_every", "100", "--trainer.plots", "true",
    )  # fmt: skip
    Trainer(config, run_dir, devices=jax.devices()[:1], progress=False).run()
    records = [r for r in read_metrics(run_dir / "metrics.jsonl") if "eval/loss" not in r]
    by_step = {r["step"]: r for r in records}
    assert [r["step"] for r in records] == [2, 3, 4, 6, 7]
    assert [s for s, r in by_step.items() if "params/norm/lm_head.weight" in r] == [3, 6, 7]
    assert "train/loss" not in by_step[3] and "train/loss" in by_step[6]  # a step only watched: norms alone
    for record in (by_step[3], by_step[6], by_step[7]):
        assert {
            "params/norm/total",
            "grad/norm/total",
            "updates/norm/total",
            "grad/norm/layers.1.mlp.up_proj.weight",
        } <= record.keys()
        assert all(v > 0 for k, v in record.items() if "/norm/" in k)
    np.testing.assert_allclose(by_step[6]["grad/norm/total"], by_step[6]["train/grad_norm"], rtol=1e-5)
    groups = group_norms(by_step[6])["params"]
    per_layer = [by_step[6][f"params/norm/layers.{i}.mlp.up_proj.weight"] for i in range(2)]
    np.testing.assert_allclose(groups["layers.mlp.up_proj.weight"], np.hypot(*per_layer), rtol=1e-12)
    png = (run_dir / "norms.png").read_bytes()
    assert png[:4] == b"\x89PNG" and (run_dir / "loss.png").exists()


def test_with_the_watch_off_nothing_is_computed_logged_or_plotted(make_config, run_dir):
    config = make_config(
        "--trainer.num_train_steps", "2", "--trainer.watch.every", "0", "--trainer.plots", "true"
    )  # fmt: skip
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    # The run's own step, traced for its output's structure (norms or None): the run below reuses that
    # trace, where a step jitted apart (and a state made for it) was traced and compiled again.
    program = trainer.program
    with jax.set_mesh(trainer.plan.mesh):
        shapes = (program.abstract_state(), program.abstract_batch(config.trainer.global_batch_size),
                  program.abstract_schedule())  # fmt: skip
        _, metrics = jax.eval_shape(program.jitted(), *shapes)
    assert metrics.norms is None
    trainer.run()
    assert not any("/norm/" in k for r in read_metrics(run_dir / "metrics.jsonl") for k in r)
    assert not (run_dir / "norms.png").exists() and (run_dir / "loss.png").exists()
