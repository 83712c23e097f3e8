"""Configs: YAML round trips, dotted overrides, one-line errors that name the field, and --help."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from meltemi.trainer.cli import main
from meltemi.trainer.command import help_text
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import describe_fields, dump_config, load_config, validate
from meltemi.trainer.errors import ConfigError

configs = st.builds(
    lambda layers, hidden, heads, lr, steps, seed, remat, batch, sources: RunConfig(
        model={"num_layers": layers, "hidden_dim": hidden * heads, "num_heads": heads, "num_kv_heads": 1,
               "remat": remat},
        optimizer={"learning_rate": lr},
        trainer={"num_train_steps": steps, "seed": seed, "global_batch_size": batch},
        data={"sources": {name: {"store": f"/stores/{name}", "weight": w} for name, w in sources.items()}},
    ),
    st.integers(1, 64), st.integers(1, 64), st.sampled_from([1, 2, 4, 8]), st.floats(1e-6, 1.0),
    st.integers(1, 10**7), st.integers(0, 2**31), st.sampled_from(["none", "full", "save_dots", "offload"]),
    st.one_of(st.integers(1, 4096), st.just([(0, 8), (100, 16)])),
    st.dictionaries(st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.floats(0, 10), max_size=3),
)  # fmt: skip


@given(configs)
def test_yaml_round_trips_exactly(config):
    assert validate(yaml.safe_load(dump_config(config))) == config


@given(
    steps=st.integers(1, 10**9), seed=st.integers(0, 2**31), dtype=st.sampled_from(["float32", "bfloat16"])
)
def test_overrides_set_the_named_fields_in_both_spellings(steps, seed, dtype):
    config = load_config(None, ["--trainer.num_train_steps", str(steps), f"--trainer.seed={seed}",
                                "--trainer.compute_dtype", dtype])  # fmt: skip
    assert (config.trainer.num_train_steps, config.trainer.seed, config.trainer.compute_dtype) == (
        steps,
        seed,
        dtype,
    )


def test_overrides_apply_on_top_of_a_yaml_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer: {num_train_steps: 5, mesh: {model: 2}}\nmodel: {remat: none}\n")
    config = load_config(path, ["--trainer.mesh.data", "4"])
    assert (config.trainer.num_train_steps, config.trainer.mesh.model, config.trainer.mesh.data) == (5, 2, 4)
    assert config.model.remat == "none"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--trainer.num_train_step", "3"], r"^--trainer.num_train_step: not a config field \(did you mean --trainer.num_train_steps\?\)$"),  # noqa: E501
        (["--trainer.steps", "3"], r"^--trainer.steps: not a config field; steps \(torchtitan\) is --trainer.num_train_steps here$"),  # noqa: E501
        (["--trainer.num_step", "3"], r"^--trainer.num_step: not a config field \(did you mean --trainer.num_train_steps\?\)$"),  # noqa: E501
        (["--modle.hidden_dim", "3"], r"^--modle.hidden_dim: not a config field: there is no section modle \(did you mean --model.hidden_dim\?\)$"),  # noqa: E501
        (["--data.sources.web.storee", "s"], r"^--data.sources.web.storee: not a config field \(did you mean --data.sources.web.store\?\)$"),  # noqa: E501
        (["--trainer.zzzz", "3"], r"^--trainer.zzzz: not a config field; --help lists them$"),
        (["--trainer.num_train_steps", "many"], r"^trainer.num_train_steps: .*integer.*\(got 'many'\)$"),
        (["--model.attention", "flash"], r"^model.attention: Input should be 'auto', .*\(got 'flash'\)$"),
        (["--model.num_kv_heads", "3"], r"model.num_kv_heads \(3\) must divide model.num_heads \(8\)"),
        (["--trainer.mesh.data", "-1", "--trainer.mesh.model", "-1"], r"at most one of trainer.mesh"),
        (["--trainer.global_batch_size", "[[5, 8]]"], r"must start at step 0"),
        (["--trainer.seed.x", "1"], r"^trainer.seed: Input should be a valid integer"),
        (["trainer.seed", "1"], r"expected an override like"),
        (["--trainer.seed"], r"has no value"),
        (["--data.stages", "[{start_step: 0, weights: {web: 1}}]"], r"unknown sources \['web'\]"),
        (["--model.attention", "mosaic", "--trainer.compute_dtype", "float32"], r"model.attention mosaic needs trainer.compute_dtype bfloat16 or float16, got float32"),  # noqa: E501
        (["--model.attention", "cudnn", "--trainer.compute_dtype", "float32"], r"model.attention cudnn needs trainer.compute_dtype"),  # noqa: E501
        (["--model.attention", "mosaic", "--hardware.chip", "A100-80GB"], r"model.attention mosaic is written for Hopper GPUs \(GH200, H100, H200\), not hardware.chip 'A100-80GB'"),  # noqa: E501
        (["--data.cache_dir", "s3://bucket/cache"], r"^data.cache_dir: must be a local directory \(a path or a file:// URL\): corpora are built .* name it in data.stores \(got 's3://bucket/cache'\)$"),  # noqa: E501
        (["--data.cache_dir", "gs:/bucket/cache"], r"^data.cache_dir: gs:/bucket/cache: a URL needs two slashes after its scheme"),  # noqa: E501
        (["--trainer.compile_cache_dir", "gs://bucket/jax"], r"^trainer.compile_cache_dir: must be a local directory .*trainer.compile_cache_mirror copies it"),  # noqa: E501
        (["--trainer.compile_cache_mirror", "s3:/bucket/jax"], r"^trainer.compile_cache_mirror: s3:/bucket/jax: a URL needs two slashes after its scheme: s3://bucket/jax"),  # noqa: E501
        (["--trainer.compile_cache_mirror", "hdfs://n/jax"], r"^trainer.compile_cache_mirror: hdfs://n/jax: unknown scheme 'hdfs'"),  # noqa: E501
    ],
)  # fmt: skip
def test_bad_values_are_one_line_errors_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        load_config(None, overrides)
    assert "\n" not in str(error.value)


def test_a_file_url_or_tilde_names_a_local_cache_directory_and_a_path_stays_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = load_config(None, ["--data.cache_dir", (tmp_path / "cache").as_uri(),
                                "--trainer.compile_cache_dir", "relative/jax"])  # fmt: skip
    assert config.data.cache_dir == str(tmp_path / "cache")
    assert config.trainer.compile_cache_dir == "relative/jax"
    config = load_config(None, ["--data.cache_dir", "~/.cache/m", "--trainer.compile_cache_dir", "~/jax"])
    assert config.data.cache_dir == str(tmp_path / "home" / ".cache" / "m")
    assert config.trainer.compile_cache_dir == str(tmp_path / "home" / "jax")


def test_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping, got list"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("model: {hidden_dim: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "broken.yaml")
    (tmp_path / "unsafe.yaml").write_text("model: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "unsafe.yaml")
    with pytest.raises(ConfigError, match=f"^config file '{tmp_path}' is a directory$"):
        load_config(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"trainer: {seed: 1} # caf\xe9\n")
    with pytest.raises(ConfigError, match="latin1.yaml' cannot be read: 'utf-8' codec"):
        load_config(tmp_path / "latin1.yaml")


def test_an_unknown_key_in_a_file_names_the_file_and_a_flag_names_itself(tmp_path):
    """A mistyped key is found where the user typed it: the file (even with a hint), or the flag as typed,
    which is refused before the file is read (a flag's mistake is not the preset's)."""
    path = tmp_path / "run.yaml"
    path.write_text("trainer:\n  steps: 3\ndata:\n  sources:\n    web: {storee: s}\n")
    with pytest.raises(
        ConfigError,
        match=rf"^trainer.steps: unknown key in {path}; steps \(torchtitan\) is trainer.num_train_steps "
        "here$",
    ):
        load_config(path)
    path.write_text("data:\n  sources:\n    web: {storee: s}\n")
    with pytest.raises(
        ConfigError,
        match=r"^data.sources.web.storee: unknown key in .* \(did you mean data.sources.web.store\?\)$",
    ):
        load_config(path)
    with pytest.raises(ConfigError, match=r"^--trainer.stepz: not a config field"):
        load_config(tmp_path / "missing.yaml", ["--trainer.stepz", "3"])


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_config_in_a_bucket_is_the_same_config_and_a_bad_url_one_line(request, server, tmp_path):
    from meltemi.datastore.storage import Directory

    fake = request.getfixturevalue(server)
    bucket = Directory(f"{fake.bucket_url()}/configs")
    text = "trainer: {num_train_steps: 7}\nmodel: {hidden_dim: 48}\n"
    bucket.write_text("run.yaml", text)
    (tmp_path / "run.yaml").write_text(text)
    overrides = ["--trainer.seed", "3"]
    assert load_config(bucket.where("run.yaml"), overrides) == load_config(tmp_path / "run.yaml", overrides)
    missing = bucket.where("nothing.yaml")
    with pytest.raises(ConfigError, match=f"^config file '{missing}' does not exist$"):
        load_config(missing)
    with pytest.raises(ConfigError, match="^config file 'hdfs://x/run.yaml' cannot be read: .*scheme"):
        load_config("hdfs://x/run.yaml")


def test_help_lists_every_field_with_its_default(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, _, default, _ in describe_fields():
        assert f"--{name}" in out and default in out
    text = help_text("python -m meltemi.trainer", None)
    assert text.startswith("usage: python -m meltemi.trainer ")
    assert "--trainer.mesh.replica" in text and "--data.sources.<name>.store" in text
    for flag in ("--dry-run", "--devices N", "--launch ray", "--verify RUN", "--no-compile-cache"):
        assert f"\n  {flag} " in text, flag


def test_the_command_line_reports_a_bad_override_in_one_line(capsys):
    assert main(["--trainer.num_train_step", "3"]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err == "error: --trainer.num_train_step: not a config field (did you mean --trainer.num_train_steps?)"
    )


@pytest.mark.parametrize("preset", ["tiny", "llama_1b", "marin_8b"])
def test_presets_load(preset):
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    config = load_config(root / "configs" / f"{preset}.yaml")
    assert config.model.vocab_size > 0
