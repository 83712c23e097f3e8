"""``model.matmul_dtype: fp8``: the tiny model trains to bf16's loss, resumes to the same bits, plans, and a
bad value or a chip without fp8 is one line."""

import shutil

import jax
import numpy as np
import pytest

import haliax_lite.quantized_ops as quantized_ops
from meltemi.trainer import adapters
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.plan.dry_run import plan_run
from meltemi.trainer.step.train_step import init_state, make_train_step
from meltemi.trainer.trainer import Trainer

STEPS = 50
# The last 10 steps' mean loss of the fp8 run must be within 2% of the bf16 run's. The tiny model's
# contractions are 32 to 64 long, too short to average away e4m3's rounding (up to 6.25% of each operand)
# and e5m2's (12.5% of each output gradient), so its gap is far larger than a wide model's: measured 1.2%
# (3.883 against 3.837 nats). The same run with every scale fixed at 1 (the mistake this guards against)
# lands at 3.6% (3.976), outside it.
TOLERANCE = 0.02


def losses(config, start, batches) -> np.ndarray:
    """The loss of each of ``STEPS`` train steps of ``config`` from ``start`` over ``batches``."""
    step = jax.jit(make_train_step(config))
    state, out = start, []
    for batch in batches:
        state, metrics = step(state, batch)
        out.append(float(metrics.loss))
    return np.array(out)


def gap(losses: np.ndarray, reference: np.ndarray) -> float:
    """How far the last 10 steps' mean loss is from the reference's, as a fraction of it."""
    return abs(losses[-10:].mean() - reference[-10:].mean()) / reference[-10:].mean()


def test_fp8_trains_the_tiny_model_to_bf16s_loss_and_unscaled_fp8_does_not(
    make_config, tmp_path, monkeypatch
):
    words = ("--trainer.compute_dtype", "bfloat16", "--trainer.num_train_steps", str(STEPS))
    bf16_config, fp8_config = make_config(*words), make_config(*words, "--model.matmul_dtype", "fp8")
    # The three runs share their data, read once (the matmul dtype does not change it); the unscaled run
    # starts from the fp8 run's state, made once (the step is not donating).
    trainer = Trainer(fp8_config, tmp_path / "run", devices=jax.devices()[:1], progress=False)
    batches = [
        adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(i))) for i in range(STEPS)
    ]
    start = init_state(fp8_config, adapters.jax_key(0, "init"))
    bf16 = losses(bf16_config, init_state(bf16_config, adapters.jax_key(0, "init")), batches)
    fp8 = losses(fp8_config, start, batches)
    assert np.max(np.abs(fp8 - bf16)) > 1e-3  # the switch is on: fp8 rounds what bf16 does not
    assert gap(fp8, bf16) < TOLERANCE, (fp8[-10:].mean(), bf16[-10:].mean())

    round_through = quantized_ops._round_through  # the negative control: every fp8 scale fixed at 1
    monkeypatch.setattr(
        quantized_ops,
        "_round_through",
        lambda x, fp8, scale, dtype: round_through(x, fp8, scale * 0 + 1, dtype),
    )
    unscaled = losses(fp8_config, start, batches)
    assert gap(unscaled, bf16) > TOLERANCE, (unscaled[-10:].mean(), bf16[-10:].mean())


def test_the_fp8_step_rounds_through_both_formats_and_keeps_the_bf16_state(make_config, run_dir):
    fp8 = make_config("--trainer.compute_dtype", "bfloat16", "--model.matmul_dtype", "fp8")
    plain = make_config("--trainer.compute_dtype", "bfloat16")
    trainer = Trainer(fp8, run_dir, devices=jax.devices()[:1], progress=False)
    batch = adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(0)))
    state = init_state(fp8, adapters.jax_key(0, "init"))
    program = jax.jit(make_train_step(fp8)).lower(state, batch).as_text()
    assert "f8E4M3FN" in program and "f8E5M2" in program
    reference = init_state(plain, adapters.jax_key(0, "init"))  # no scaling state: checkpoints are bf16's
    assert "f8E4M3FN" not in jax.jit(make_train_step(plain)).lower(reference, batch).as_text()
    paths = lambda tree: [path for path, _ in jax.tree_util.tree_leaves_with_path(tree)]  # noqa: E731
    assert paths(state) == paths(reference)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(reference), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_fp8_run_resumed_from_a_checkpoint_ends_bitwise_equal(make_config, tmp_path):
    config = make_config(
        "--trainer.compute_dtype", "bfloat16", "--model.matmul_dtype", "fp8",
        "--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "2", "--trainer.keep_every", "2",
    )  # fmt: skip
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    Trainer(config, whole, devices=jax.devices()[:1], progress=False).run()
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step-4")
    assert Trainer(config, resumed, devices=jax.devices()[:1], progress=False).run().start_step == 2

    def arrays(run_dir):
        root = run_dir / "checkpoints" / "step-4"
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("c/**/*")) if p.is_file()}

    assert arrays(whole) and arrays(whole) == arrays(resumed)


def test_the_dry_run_compiles_the_fp8_step(make_config):
    plan = plan_run(make_config("--model.matmul_dtype", "fp8", "--hardware.chip", "H100"), jax.devices()[:1])
    assert plan.fits and plan.compiled.peak_bytes > 0


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (("--model.matmul_dtype", "fp16"), "model.matmul_dtype"),
        (
            ("--model.matmul_dtype", "fp8", "--hardware.chip", "A100-80GB"),
            "which hardware.chip 'A100-80GB' lacks",
        ),
        (
            ("--model.matmul_dtype", "fp8", "--hardware.chip", "TPU v5p"),
            "which hardware.chip 'TPU v5p' lacks",
        ),
    ],
)
def test_a_bad_matmul_dtype_or_a_chip_without_fp8_is_one_line(make_config, words, message):
    with pytest.raises(ConfigError, match=message) as error:
        make_config(*words)
    assert "\n" not in str(error.value)
