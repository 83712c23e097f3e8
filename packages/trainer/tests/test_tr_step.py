"""The train step: gradient accumulation, NaN policies, determinism, and the loss falling."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.datastore.storage import read_object
from meltemi.trainer import adapters
from meltemi.trainer.errors import NonFiniteError
from meltemi.trainer.step.train_step import init_state, make_train_step
from meltemi.trainer.trainer import Trainer


def leaves(state):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(state)]


def first_batch(trainer, step=0):
    return adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(step)))


def test_microbatches_accumulate_to_the_full_batch_gradient(make_config, run_dir):
    whole = make_config()
    micro = make_config("--trainer.microbatch_size", "4")
    trainer = Trainer(whole, run_dir, devices=jax.devices()[:1], progress=False)
    batch = first_batch(trainer)
    state = init_state(whole, adapters.jax_key(0, "init"))
    a, ma = jax.jit(make_train_step(whole))(state, batch)
    b, mb = jax.jit(make_train_step(micro))(init_state(micro, adapters.jax_key(0, "init")), batch)
    np.testing.assert_allclose(ma.loss, mb.loss, rtol=1e-6)
    np.testing.assert_allclose(ma.grad_norm, mb.grad_norm, rtol=1e-5)
    # Adam's first update is lr * g / (|g| + eps): an element whose gradient is near eps moves by a visible
    # fraction of lr when the summation order changes, so parameters agree to 1e-3 of lr (1e-2), not to rtol.
    for x, y in zip(leaves(a.model), leaves(b.model), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def poisoned(state, token=None):
    """``state`` with the embedding of ``token`` (every token when None) set to NaN."""
    weight = state.model.embed_tokens.weight
    rows = weight.array.at[:].set(jnp.nan) if token is None else weight.array.at[token].set(jnp.nan)
    return jax.tree_util.tree_map(
        lambda x: rows if x is weight.array else x, state, is_leaf=lambda x: x is weight.array
    )


def test_a_nan_batch_is_skipped_and_counted_and_the_next_one_trains(make_config, run_dir):
    config = make_config()
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    batch = first_batch(trainer)
    bad_token = int(np.asarray(batch.input_ids.array)[0, 0])
    state = poisoned(init_state(config, adapters.jax_key(0, "init")), bad_token)
    step = jax.jit(make_train_step(config))
    after, metrics = step(state, batch)
    assert not bool(metrics.applied) and int(after.skipped_steps) == 1 and int(after.step) == 1
    for x, y in zip(leaves(after.model), leaves(state.model), strict=True):
        np.testing.assert_array_equal(x, y)
    clean_ids = jnp.where(batch.input_ids.array == bad_token, (bad_token + 1) % 384, batch.input_ids.array)
    clean = eqx.tree_at(lambda b: b.input_ids, batch, hax.named(clean_ids, batch.input_ids.axes))
    trained, metrics = step(after, clean)
    assert bool(metrics.applied) and int(trained.skipped_steps) == 1


def test_nan_policy_stop_names_the_step(make_config, run_dir):
    config = make_config("--trainer.nan_policy", "stop")
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    with pytest.raises(NonFiniteError, match=r"^step 0: the loss \(nan\).*trainer.nan_policy: stop"):
        trainer.run(state=poisoned(trainer.initial_state()))
    assert (run_dir / "metrics.jsonl").exists()


def test_nan_policy_skip_runs_to_the_end_counting_skips(make_config, run_dir):
    config = make_config("--trainer.num_train_steps", "3")
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    summary = trainer.run(state=poisoned(trainer.initial_state()))
    assert summary.steps == 3 and summary.skipped_steps == 3


def test_two_runs_of_one_config_are_bitwise_equal_and_learn(make_config, tmp_path):
    config = make_config(
        "--trainer.num_train_steps", "8", "--trainer.eval_every", "4", "--trainer.plots", "true"
    )  # fmt: skip
    states = []
    for name in ("a", "b"):
        trainer = Trainer(config, tmp_path / name, devices=jax.devices()[:1], progress=False)
        state = trainer.initial_state()
        summary = trainer.run(state)
        states.append(trainer)
        assert summary.last_eval["eval/loss"] < summary.first_eval["eval/loss"] - 0.3
        assert {"eval/py/loss", "eval/py/bpb", "eval/loss", "eval/bpb"} <= set(summary.last_eval)
        assert read_object(summary.plot_path)[:4] == b"\x89PNG"
    records = [(tmp_path / n / "metrics.jsonl").read_text() for n in ("a", "b")]
    strip = [[line.split('"throughput')[0] for line in r.splitlines()] for r in records]
    assert strip[0] == strip[1]


def test_final_parameters_of_two_runs_are_bitwise_equal(make_config, tmp_path):
    config = make_config("--trainer.num_train_steps", "4")
    for name in ("a", "b"):
        Trainer(config, tmp_path / name, devices=jax.devices()[:1], progress=False).run()

    def arrays(run):
        root = tmp_path / run / "checkpoints" / "step-4"
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    first, second = arrays("a"), arrays("b")
    assert len([n for n in first if n.startswith("model.")]) >= 12
    assert first == second


def test_the_compiled_step_holds_no_host_callback(make_config, run_dir):
    """The hot path passes check_finite=False and check_labels=False: a callback would stop the device
    and wait for the host every step."""
    config = make_config()
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    state = init_state(config, adapters.jax_key(0, "init"))
    text = jax.jit(make_train_step(config)).lower(state, first_batch(trainer)).as_text()
    assert "callback" not in text


@pytest.mark.gpu
@pytest.mark.parametrize("matmul_dtype", ["compute", "fp8"])
def test_a_bf16_step_of_the_tiny_model_on_a_gpu_matches_the_cpu(make_config, run_dir, matmul_dtype):
    """One train step with bf16 compute on the GPU (its matmuls in fp8 too), against the same step on the
    CPU: XLA's GPU and CPU programs differ in fusion and reduction order, so the losses agree to bf16's
    precision, not bitwise."""
    config = make_config("--trainer.compute_dtype", "bfloat16", "--model.matmul_dtype", matmul_dtype)
    trainer = Trainer(config, run_dir, devices=jax.devices("cpu")[:1], progress=False)
    batch = first_batch(trainer)
    losses = []
    for device in (jax.devices("gpu")[0], jax.devices("cpu")[0]):
        state = jax.device_put(init_state(config, adapters.jax_key(0, "init")), device)
        after, metrics = jax.jit(make_train_step(config))(state, jax.device_put(batch, device))
        assert bool(metrics.applied) and int(after.step) == 1
        losses.append(float(metrics.loss))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-2)
