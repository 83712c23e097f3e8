"""Sharding by config on 8 fake CPU devices: every mesh trains like one device; misfits are named errors."""

import jax
import numpy as np
import pytest

from meltemi.trainer.errors import MeshError
from meltemi.trainer.plan.sharding_table import format_report, sharding_report
from meltemi.trainer.step.mesh import MeshPlan, inference_layout
from meltemi.trainer.trainer import Trainer


def loss_curve(config, run_dir, devices):
    trainer = Trainer(config, run_dir, devices=devices, progress=False)
    trainer.run()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    import json

    records = [json.loads(line) for line in lines]
    return np.array([r["train/loss"] for r in records if "train/loss" in r]), trainer


HEADS = ["--model.num_heads", "8", "--model.num_kv_heads", "4", "--trainer.log_every", "1"]  # 4 | kv heads


@pytest.fixture
def one_device_curve(make_config, shared) -> np.ndarray:
    """The loss curve of the run on one device, trained once per session for every mesh to match."""

    def build(root):
        curve, _ = loss_curve(make_config(*HEADS), root / "one", jax.devices()[:1])
        np.save(root / "curve.npy", curve)

    return np.load(shared.get("mesh-one-device-curve", build) / "curve.npy")


@pytest.mark.parametrize(("data", "model"), [(8, 1), (4, 2), (2, 4)])
def test_every_mesh_gives_the_loss_curve_of_one_device(make_config, one_device_curve, tmp_path, data, model):
    # float32 compute: sharded runs differ from one device only in the order of reductions (all-reduces of
    # gradients, sums over sharded axes), about 1e-7 relative per operation. Adam's update is bounded by the
    # learning rate whatever the gradient, so after 6 steps the losses agree to well under 1e-4 relative;
    # a sharding bug (a wrong layout, a missing reduction) moves them by far more than that.
    single = one_device_curve
    sharded_config = make_config(*HEADS, "--trainer.mesh.data", str(data), "--trainer.mesh.model", str(model))
    sharded, trainer = loss_curve(sharded_config, tmp_path / "mesh", jax.devices()[:8])
    assert trainer.plan.shape == {"replica": 1, "data": data, "model": model}
    assert len(single) == 6
    np.testing.assert_allclose(sharded, single, rtol=1e-4)


def test_parameters_are_stored_sharded_as_the_mapping_says(make_config):
    config = make_config("--trainer.mesh.data", "4", "--trainer.mesh.model", "2")
    plan = MeshPlan.of(config, jax.devices()[:8])
    report = sharding_report(config, plan)
    by_path = {p.path: p for p in report.parameters}
    q = by_path["layers.stacked.self_attn.q_proj.weight"]
    assert q.partition == "P(None, 'model', None, None, 'data')"
    assert q.bytes_per_device == np.prod(q.shape) * 4 // 8
    assert by_path["norm.weight"].partition == "P('data',)"
    assert report.optimizer_bytes == 2 * report.parameter_bytes + 4  # mu, nu, and Adam's step counter
    text = format_report(report, plan)
    assert "layers.stacked.mlp.up_proj.weight" in text and "optimizer state" in text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--trainer.mesh.data", "3"], r"trainer.mesh.replica=1 x trainer.mesh.data=3 x trainer.mesh.model=1 needs 3 devices, but there are 8"),  # noqa: E501
        (["--trainer.mesh.data", "-1", "--trainer.mesh.model", "3"], r"do not divide the 8 devices"),
        (["--trainer.mesh.data", "8", "--trainer.global_batch_size", "12"], r"global_batch_size 12 does not split over the 8"),  # noqa: E501
        (["--trainer.mesh.data", "2", "--trainer.mesh.model", "4"], r"'kv_heads' \(2\) does not split over the 4 devices"),  # noqa: E501
        (["--trainer.mesh.data", "8", "--trainer.microbatch_size", "4"], r"microbatch_size 4 must divide"),
        (["--trainer.mesh.data", "8", "--trainer.parameter_axis_mapping", "{embed: fsdp}"], r"trainer.parameter_axis_mapping.embed: mesh axes \['fsdp'\] do not exist"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_mesh_that_does_not_fit_is_a_named_error_before_any_compile(
    make_config, run_dir, overrides, message
):
    config = make_config(*overrides)
    with pytest.raises(MeshError, match=message):
        Trainer(config, run_dir, devices=jax.devices()[:8], progress=False)
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("overrides", "devices", "shape", "reason"),
    [
        (["--trainer.mesh.data", "-1"], 8, (1, 8, 1), "the run's mesh (data 8)"),
        (["--trainer.mesh.data", "4", "--trainer.mesh.model", "2"], 8, (1, 4, 2), "the run's mesh (data 4 x model 2)"),  # noqa: E501
        (["--trainer.mesh.data", "1"], 8, (1, 8, 1), "chosen for the 8 devices present (data 8): the run's mesh does not fit them"),  # noqa: E501
        (["--trainer.mesh.replica", "2", "--trainer.mesh.data", "16", "--trainer.mesh.model", "2"], 4, (1, 2, 2), "chosen for the 4 devices present (data 2 x model 2)"),  # noqa: E501
        (["--trainer.mesh.data", "-1", "--trainer.mesh.model", "2"], 6, (1, 3, 2), "kept whole: embed (32) does not split over 3 devices"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_trained_model_is_laid_out_on_the_devices_present(make_config, overrides, devices, shape, reason):
    config = make_config(*overrides)
    layout = inference_layout(config, jax.devices()[:devices])
    assert tuple(layout.plan.shape.values()) == shape
    assert reason in layout.reason
    assert layout.plan.compute_mapping["batch"] == ("replica", "data")
    if "kept whole" in reason:
        assert "embed" not in layout.plan.parameter_mapping  # replicated, since it cannot split evenly
    else:
        assert layout.plan.parameter_mapping["embed"] == "data"  # fully sharded, as the run stores it
