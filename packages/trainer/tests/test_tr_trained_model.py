"""A trained model read back for use: sharded over every device (no device holds the whole model), the same
parameters as on one device, and the same scores, samples and export."""

import filecmp
import json
import shutil

import jax
import numpy as np
import pytest

from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.generate.generation import generate
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.harness.scoring import TokenScorer
from meltemi.trainer.hf.export import export_hf

REQUESTS = [([5, 9, 11, 40], [7, 8]), ([3] * 20, [100, 200, 300]), ([1, 2], [3])]


@pytest.fixture
def loaded(base):
    """The base run (built once per session) loaded on the eight devices, as the apps load it, and on the
    first device alone."""
    return load_model(base), load_model(base, devices=jax.devices()[:1])


def test_each_device_holds_an_eighth_of_every_parameter(loaded):
    sharded, _ = loaded
    assert sharded.layout.plan.shape == {"replica": 1, "data": 8, "model": 1}
    assert "chosen for the 8 devices present" in sharded.layout.reason  # the run trained on one device
    leaves = jax.tree.leaves(sharded.model)
    assert leaves
    for leaf in leaves:
        assert len(leaf.addressable_shards) == 8
        assert {shard.data.size for shard in leaf.addressable_shards} == {leaf.size // 8}


def test_the_parameters_are_those_read_on_one_device(loaded):
    sharded, alone = loaded
    assert alone.layout.plan.shape == {"replica": 1, "data": 1, "model": 1}
    for ours, theirs in zip(jax.tree.leaves(sharded.model), jax.tree.leaves(alone.model), strict=True):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_scores_and_greedy_samples_equal_the_single_device_ones(loaded):
    sharded, alone = loaded
    plan = sharded.layout.plan
    spread = TokenScorer(sharded.model, batch_size=3, plan=plan).score(REQUESTS)
    single = TokenScorer(alone.model, batch_size=3).score(REQUESTS)
    for ours, theirs in zip(spread, single, strict=True):
        assert ours.logprob == pytest.approx(theirs.logprob, rel=1e-5)
        assert ours.greedy == theirs.greedy
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    prompts = [[5, 9, 11, 40], [3, 4]]
    ours = generate(sharded.model, prompts, greedy, plan=plan)
    theirs = generate(alone.model, prompts, greedy)
    assert [c.tokens for c in ours.completions] == [c.tokens for c in theirs.completions]


def test_the_export_of_the_sharded_model_is_byte_for_byte_the_single_device_one(loaded, tmp_path):
    sharded, alone = loaded
    ours, theirs = export_hf(sharded.model, tmp_path / "ours"), export_hf(alone.model, tmp_path / "theirs")
    names = sorted(p.name for p in theirs.iterdir())
    match, mismatch, errors = filecmp.cmpfiles(ours, theirs, names, shallow=False)
    assert (mismatch, errors) == ([], []) and match == names


def test_a_model_is_held_and_computed_in_the_dtype_asked_for_each_shard_where_it_lies(loaded, tmp_path):
    sharded, _ = loaded
    half = load_model(sharded.checkpoint, dtype="bfloat16")
    assert (half.config.trainer.param_dtype, half.config.trainer.compute_dtype) == ("bfloat16", "bfloat16")
    for ours, theirs in zip(jax.tree.leaves(half.model), jax.tree.leaves(sharded.model), strict=True):
        assert ours.dtype == jax.numpy.bfloat16 and ours.sharding == theirs.sharding
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs).astype(ours.dtype))
    exported = export_hf(half.model, tmp_path / "hf", dtype="bfloat16")
    assert load_model(exported).config.trainer.compute_dtype == "bfloat16"  # its torch_dtype
    wide = load_model(exported, dtype="float32")
    assert (
        wide.config.trainer.compute_dtype == "float32" and wide.model.embed_tokens.weight.dtype == np.float32
    )
    np.testing.assert_array_equal(
        np.asarray(wide.model.embed_tokens.weight.array), np.asarray(half.model.embed_tokens.weight.array)
    )


def test_a_recorded_config_that_no_longer_validates_names_the_manifest_that_holds_it(base, tmp_path):
    """The user typed no config here: the one-line error says which record the value comes from."""
    run = tmp_path / "run"
    shutil.copytree(base, run)
    (manifest,) = run.glob("checkpoints/step-*/manifest.json")
    record = json.loads(manifest.read_text())
    record["config"]["trainer"]["compile_cache_dir"] = "s3://bucket/jax"  # refused since it was written
    manifest.write_text(json.dumps(record))
    with pytest.raises(ConfigError) as refused:
        load_model(run, devices=jax.devices()[:1])
    assert str(refused.value).startswith(f"{manifest}: trainer.compile_cache_dir: must be a local directory")


def test_the_recorded_sample_prompt_is_the_runs_and_a_run_without_one_is_named(base, tmp_path):
    from meltemi.trainer.generate.generation import recorded_sample_prompt
    from meltemi.trainer.generate.sampling import GenerationError

    run = tmp_path / "run"
    shutil.copytree(base, run)
    (manifest,) = run.glob("checkpoints/step-*/manifest.json")
    record = json.loads(manifest.read_text())
    record["config"]["trainer"]["sample_prompt"] = "import "
    manifest.write_text(json.dumps(record))
    assert recorded_sample_prompt(run) == recorded_sample_prompt(manifest.parent) == "import "
    record["config"]["trainer"]["sample_prompt"] = None
    manifest.write_text(json.dumps(record))
    unrecorded = r"step-\d+: its run records no trainer.sample_prompt to continue$"
    with pytest.raises(GenerationError, match=unrecorded):
        recorded_sample_prompt(run)
