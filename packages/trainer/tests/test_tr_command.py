"""The one command line (command.py), the config checks a user meets first (chips, sequence length, MFU), and
how data.stores / data.corpus / stdlib become concrete sources (data_sources.py)."""

import sysconfig
from pathlib import Path

import jax
import pytest

from meltemi.datastore import corpora
from meltemi.trainer.chips import CHIPS, chip_named, chip_of_device_kind
from meltemi.trainer.command import FLAGS, LaunchFlags, parse_command
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import load_config
from meltemi.trainer.data.sources import resolve_data, stdlib_directory
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.plan.dry_run import format_plan, plan_run

VOCAB = 384  # the vocabulary of the test store (conftest.py)


def test_the_commands_flags_are_read_and_checked_and_the_rest_are_overrides():
    command = parse_command(["--trainer.seed", "3", "--run-dir=r", "--data.stores", "a", "b", "--dry-run",
                             "--mfu", "0.4", "--devices", "16"])  # fmt: skip
    assert command.overrides == ("--trainer.seed", "3", "--data.stores", "a", "b")
    assert (command.run_dir, command.dry_run, command.mfu, command.devices) == ("r", True, 0.4, 16)
    launch = parse_command(["--launch", "ray", "--slices", "2", "--address", "h:1"]).launch
    assert launch == LaunchFlags("ray", slices=2, address="h:1")
    assert parse_command(["-h"]).help


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run-dir"], "--run-dir needs a value: --run-dir DIR"),
        (["--run-dir", "--trainer.seed", "1"], "--run-dir needs a value: --run-dir DIR"),
        (["--dry-run=yes"], "--dry-run takes no value (got '--dry-run=yes')"),
        (["--dry-run", "--devices", "0"], "--devices 0: must be positive"),
        (["--dry-run", "--mfu", "0"], "--mfu 0: must be a fraction in (0, 1], e.g. 0.5"),
        (["--dry-run", "--mfu", "1.5"], "--mfu 1.5: must be a fraction in (0, 1], e.g. 0.5"),
        (["--dry-run", "--mfu", "half"], "--mfu half: expected a number"),
        (["--mfu", "0.5"], "--mfu: only with --dry-run"),
        (["--slices", "2", "--address", "h:1"], "--slices, --address: only with --launch ray"),
        (["--launch", "ray", "--slices", "two"], "--slices two: expected an integer"),
        (
            ["--verify", "runs/a", "--dry-run", "--model.num_layers=2"],
            "--verify RUN checks RUN as it recorded itself: not with --dry-run, --model.num_layers",
        ),
        (
            ["--run-dir", "r", "--verify", "a", "--no-compile-cache"],
            "--verify RUN checks RUN as it recorded itself: not with --run-dir, --trainer.compile_cache",
        ),
    ],
)
def test_a_bad_command_line_is_one_error_naming_the_flag(argv, message):
    with pytest.raises(ConfigError) as raised:
        parse_command(argv)
    assert str(raised.value) == message


def test_every_flag_has_help_and_no_flag_shadows_a_config_field():
    assert len({f.name for f in FLAGS}) == len(FLAGS) and all(f.help for f in FLAGS)
    assert not [f.name for f in FLAGS if "." in f.name]  # a dotted name is a config field's


def test_a_chip_is_named_exactly_and_an_unknown_one_lists_the_known():
    assert chip_named("A100-40GB").memory_gib == 40 and chip_named("A100-80GB").memory_gib == 80
    for wrong in ("A100-40", "a100-40gb", "TPU", "H100 "):
        with pytest.raises(ConfigError, match=r"^hardware.chip: unknown chip .*known chips: 'TPU v3', "):
            chip_named(wrong)
    with pytest.raises(ConfigError, match=r"hardware.chip: unknown chip .*did you mean 'A100-40GB'"):
        load_config(None, ["--hardware.chip", "A100-40"])
    assert all(chip.memory_gib > 0 and chip.peak_bf16_tflops > 0 and chip.source for chip in CHIPS.values())


def test_a_device_is_matched_by_its_exact_kind_never_a_substring():
    assert chip_of_device_kind("NVIDIA A100-SXM4-40GB").name == "A100-40GB"
    assert chip_of_device_kind("TPU v5 lite").name == "TPU v5e"
    assert chip_of_device_kind("cpu") is None and chip_of_device_kind("NVIDIA H100 PCIe") is None


def small(*overrides: str) -> RunConfig:
    base = ["--model.vocab_size", "64", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
            "--model.num_layers", "2", "--trainer.global_batch_size", "8",
            "--data.seq_len", "16"]  # fmt: skip
    return load_config(None, [*base, *overrides])


def test_the_dry_run_checks_against_the_chip_or_the_memory_given():
    config = small("--hardware.chip", "A100-40GB")
    plan = plan_run(config, jax.devices()[:1])
    assert plan.budget.device_memory == 40 * 2**30 and plan.fits and plan.step_seconds > 0
    tight = plan_run(
        small("--hardware.chip", "A100-40GB", "--hardware.memory_gib", str(2**-20)), jax.devices()[:1]
    )
    assert tight.budget.device_memory == 1024 and not tight.fits
    assert tight.budget.limit == "9.54e-07 GiB per device (hardware.memory_gib)"  # not the chip's 40
    assert "against 9.54e-07 GiB per device (hardware.memory_gib): does NOT fit" in format_plan(tight)
    assert plan.budget.limit == "40 GiB per A100-40GB"
    unset = plan_run(small("--hardware.memory_gib", "2"), jax.devices()[:1])
    assert unset.chip is None and unset.budget.device_memory == 2 * 2**30 and unset.step_seconds is None
    with pytest.raises(ConfigError, match=r"^--mfu 0: the model FLOPs utilisation is a fraction in \(0, 1\]"):
        plan_run(config, jax.devices()[:1], mfu=0)


def test_a_dry_run_on_a_cpu_says_its_plan_of_a_16_bit_program_overstates_an_accelerator():
    bf16 = plan_run(small("--hardware.chip", "H100"), jax.devices()[:1])
    (note,) = bf16.notes
    assert note.startswith("XLA's CPU compiler holds bfloat16")
    assert f"  note: {note}" in format_plan(bf16).splitlines()
    f32 = plan_run(small("--hardware.chip", "H100", "--trainer.compute_dtype", "float32"), jax.devices()[:1])
    no_verdict = plan_run(small(), jax.devices()[:1])
    assert f32.notes == () and no_verdict.notes == ()
    assert "XLA's CPU compiler holds" not in format_plan(f32) + format_plan(no_verdict)


@pytest.mark.parametrize("kernel", ["mosaic", "cudnn"])
def test_a_dry_run_on_a_cpu_plans_a_gpu_only_attention_kernel_as_xla_and_says_so(kernel):
    """The config is the GPU's (the kernels compile only for one); the CPU compiles the step with the
    blockwise XLA attention instead, whose memory is linear in the sequence as theirs is."""
    plan = plan_run(small("--hardware.chip", "H100", "--model.attention", kernel), jax.devices()[:1])
    precision, attention = plan.notes
    assert precision.startswith("XLA's CPU compiler holds bfloat16")
    assert attention.startswith(
        f"model.attention {kernel} compiles only for a GPU: attention is planned here"
    )
    assert f"  note: {attention}" in format_plan(plan).splitlines()
    assert plan.compiled.peak_bytes > 0


def test_sequences_longer_than_the_model_is_built_for_are_refused_with_the_config():
    with pytest.raises(ConfigError) as raised:
        small("--data.seq_len", "128", "--model.max_seq_len", "64")
    assert str(raised.value) == (
        "data.seq_len (128) is longer than model.max_seq_len (64), the positions the model is built for: "
        "lower data.seq_len or raise model.max_seq_len"
    )
    assert small("--data.seq_len", "64", "--model.max_seq_len", "64").data.seq_len == 64


def test_stores_replace_corpus_and_sources_and_get_distinct_names(tmp_path):
    tokenizer = tmp_path / "t.json"
    tokenizer.write_text("{}")
    stores = [str(tmp_path / s) for s in ("a/web", "b/web", "code")]
    config = small("--data.corpus", "x.txt", "--data.sources", "{old: {store: s}}", "--data.stores", *stores,
                   "--data.tokenizer", str(tokenizer))  # fmt: skip
    with pytest.raises(ConfigError, match=rf"^data.stores: {stores[0]}: no such token store"):
        resolve_data(config)
    for store in stores:
        Path(store).mkdir(parents=True)
    data = resolve_data(config).data
    names = {name: source.store for name, source in data.sources.items()}
    assert names == {"web": stores[0], "web-2": stores[1], "code": stores[2]}
    assert (data.stores, data.corpus, data.tokenizer) == ([], None, str(tokenizer))
    assert load_config(None, ["--data.stores", "one"]).data.stores == ["one"]


def test_a_tokenizer_is_a_file_a_models_directory_or_a_models_hub_name(tmp_path, monkeypatch):
    from meltemi.datastore.testing import put_in_hub_cache
    from meltemi.trainer.phase.initialize import resolve_run

    model = tmp_path / "model"
    model.mkdir()
    corpora.train_tokenizer(corpora.python_stdlib()[:2], 300, model / "tokenizer.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = put_in_hub_cache(tmp_path / "hub", "org/model", "model", model)
    for given, found in ((model, model), ("org/model", snapshot)):
        config = small("--data.tokenizer", str(given), "--data.stores", str(tmp_path))
        assert resolve_run(config).data.tokenizer == str(found / "tokenizer.json")


def test_a_missing_tokenizer_is_named_before_anything_is_built(tmp_path):
    config = small(
        "--data.corpus", "c.txt", "--data.tokenizer", "no/t.json", "--data.cache_dir", str(tmp_path)
    )
    with pytest.raises(ConfigError) as raised:
        resolve_data(config)
    assert str(raised.value) == (
        "data.tokenizer: no/t.json: no such file (a tokenizer.json, a model directory holding one, or stdlib)"
    )
    assert not list(tmp_path.iterdir())
    as_url = small("--data.corpus", "c.txt", "--data.tokenizer", f"file://{tmp_path}/no/t.json")
    with pytest.raises(ConfigError, match=r"no/t.json: no such file"):  # a file:// URL is a local path too
        resolve_data(as_url)
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"^data.stores: file:///no/store: no such token store"):
        resolve_data(
            small("--data.stores", "file:///no/store", "--data.tokenizer", f"file://{tmp_path}/t.json")
        )


def test_a_concrete_config_is_left_as_it_is():
    config = small("--data.sources", "{old: {store: s, weight: 2}}", "--data.tokenizer", "t.json")
    assert resolve_data(config) is config


def test_a_corpus_is_built_once_under_the_cache_dir_and_named_by_its_file(tmp_path, corpus):
    (tmp_path / "mine.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    said = []
    config = small("--model.vocab_size", str(VOCAB), "--data.tokenizer", corpus["tokenizer"],
                   "--data.corpus", str(tmp_path / "mine.txt"),
                   "--data.cache_dir", str(tmp_path / "cache"))  # fmt: skip
    first = resolve_data(config, say=said.append)
    ((name, source),) = first.data.sources.items()
    assert name == "mine" and source.store.startswith(str(tmp_path / "cache" / "corpora" / "mine-"))
    assert (
        said[0].startswith(f"building a token store of {tmp_path / 'mine.txt'}")
        and "built 1 doc, " in said[-1]
    )
    said.clear()
    assert resolve_data(config, say=said.append) == first
    assert not any("building" in line for line in said)


def test_a_corpus_of_several_subsets_and_no_default_is_refused_with_the_source_that_reads_one(
    tmp_path, corpus
):
    """``data.corpus`` has no subset of its own: the refusal names the ``data.sources`` override that reads
    one, and that override, as given, builds the subset's train split only."""
    import shlex

    import pyarrow as pa
    import pyarrow.parquet as pq

    from meltemi.datastore import DatastoreError

    wiki = tmp_path / "wikitext"
    card = "---\nconfigs:\n" + "".join(
        f"- config_name: {name}\n  data_files:\n  - split: train\n    path: {name}/train-*\n"
        f"  - split: test\n    path: {name}/test-*\n"
        for name in ("raw", "tokenized")
    )
    for name, rows in (("raw", 3), ("tokenized", 5)):
        (wiki / name).mkdir(parents=True)
        pq.write_table(pa.table({"text": [f"def f{i}(): pass" for i in range(rows)]}),
                       wiki / name / "train-00000-of-00001.parquet")  # fmt: skip
        pq.write_table(pa.table({"text": ["held out"]}), wiki / name / "test-00000-of-00001.parquet")
    (wiki / "README.md").write_text(card + "---\n")
    common = ("--model.vocab_size", str(VOCAB), "--data.tokenizer", corpus["tokenizer"],
              "--data.cache_dir", str(tmp_path / "cache"))  # fmt: skip
    with pytest.raises(
        DatastoreError, match=r"names the subsets raw, tokenized, and none is its default"
    ) as e:
        resolve_data(small(*common, "--data.corpus", str(wiki)), say=lambda line: None)
    hint = str(e.value).rpartition("choose one (")[2].removesuffix(")")
    said = []
    resolved = resolve_data(small(*common, *shlex.split(hint.replace("NAME", "tokenized"))), say=said.append)
    assert list(resolved.data.sources) == ["wikitext"] and "built 5 docs" in said[1]
    assert (
        "-test-" in resolved.data.sources["wikitext"].eval_store
        and "(its test split of subset tokenized" in said[3]
    )


def test_the_standard_librarys_cache_names_the_python_the_vocabulary_and_the_files_revision():
    directory = stdlib_directory(small("--data.cache_dir", "c", "--model.vocab_size", "300"))
    assert directory == Path("c") / f"stdlib-py{sysconfig.get_python_version()}-v300-r2"  # r1: named -chat


EXITING = """
import atexit, sys
from meltemi.trainer.cli import exit_process

class Garbage:  # kept alive only by its own cycle, so only a garbage collection can finalize it
    def __del__(self):
        print("collected")

cycle = Garbage()
cycle.me = cycle
del cycle
atexit.register(lambda: print("exit handler"))
print("buffered", end="")  # not yet flushed when the exit starts
exit_process(int(sys.argv[1]))
"""


def test_a_command_exits_with_its_status_after_its_exit_handlers_but_skips_the_last_collection():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", EXITING, "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "bufferedexit handler\n"  # no "collected": the shutdown's collection was skipped


NEITHER = "neither a flag of this command nor a config field"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dryrun", "true"], f"--dryrun: {NEITHER} (did you mean --dry-run?)"),
        (["--dryrun"], f"--dryrun: {NEITHER} (did you mean --dry-run?)"),
        (["--num_train_steps", "5"], "--num_train_steps: neither a flag of this command nor a config field "
                                     "(did you mean --trainer.num_train_steps?)"),
        (["--zzz"], "--zzz: neither a flag of this command nor a config field; --help lists both"),
    ],
)  # fmt: skip
def test_a_mistyped_flag_is_named_with_the_nearest_flag_or_field_not_blamed_on_the_config(argv, message):
    with pytest.raises(ConfigError) as caught:
        parse_command(argv)
    assert str(caught.value) == message


TRAINING_ARGUMENTS = "(transformers' TrainingArguments)"
RUN_CLM = "(transformers' run_clm.py)"


@pytest.mark.parametrize(
    ("argv", "fine_tuning", "answer"),
    [
        (["--max_steps", "5"], False, f"max_steps {TRAINING_ARGUMENTS} is --trainer.num_train_steps here"),
        (["--output_dir", "x"], False, f"output_dir {TRAINING_ARGUMENTS} is --run-dir here"),
        (["--model_name_or_path", "x"], False, f"model_name_or_path {RUN_CLM} is "
                                               "--trainer.initialize_from.path here"),
        (["--model_name_or_path", "x"], True, f"model_name_or_path {RUN_CLM} is --base here"),
    ],
)  # fmt: skip
def test_another_tools_name_for_a_setting_is_answered_with_ours(argv, fine_tuning, answer):
    """`--steps` used to be asked "did you mean --slices?": a near spelling of something else."""
    with pytest.raises(ConfigError) as caught:
        parse_command(argv, fine_tuning=fine_tuning)
    assert str(caught.value) == f"{argv[0]}: {NEITHER}; {answer}"


def test_another_tools_field_name_in_a_section_or_a_yaml_file_is_answered_with_ours(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["--model.hidden_size", "64"])
    answer = "hidden_size (transformers' LlamaConfig) is --model.hidden_dim here"
    assert str(caught.value) == f"--model.hidden_size: not a config field; {answer}"
    preset = tmp_path / "mine.yaml"
    preset.write_text("trainer:\n  max_steps: 10\n")
    with pytest.raises(ConfigError) as caught:
        load_config(str(preset), [])
    answer = f"max_steps {TRAINING_ARGUMENTS} is trainer.num_train_steps here"
    assert str(caught.value).endswith(f"trainer.max_steps: unknown key in {preset}; {answer}")


def test_every_other_tools_name_names_a_setting_we_have():
    from meltemi.trainer.config_io import describe_fields
    from meltemi.trainer.other_names import OTHER_NAMES

    fields = {row[0].replace("<name>", "NAME") for row in describe_fields()}
    flags = {flag.name for flag in FLAGS}
    for name, other in OTHER_NAMES.items():
        assert other.ours in fields or other.ours in flags, (name, other.ours)
        assert other.fine_tuning is None or other.fine_tuning in flags, name


def test_data_named_on_the_command_line_replaces_the_way_the_preset_names_its_own(tmp_path):
    """tiny.yaml trains on `corpus: stdlib`; `--data.sources` (or `--data.stores`) must not lose to it."""
    preset = tmp_path / "preset.yaml"
    preset.write_text("data:\n  corpus: stdlib\n  seq_len: 64\n")
    sources = load_config(preset, ["--data.sources", "{web: {store: s, weight: 2}}"]).data
    assert (sources.corpus, list(sources.sources), sources.seq_len) == (None, ["web"], 64)
    stores = load_config(preset, ["--data.stores", "a"]).data
    assert (stores.corpus, stores.stores) == (None, ["a"])
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("data:\n  sources:\n    web: {store: s}\n    code: {store: c}\n")
    reweighed = load_config(mixed, ["--data.sources.code.weight", "3"]).data.sources  # the preset's, changed
    assert (reweighed["web"].weight, reweighed["code"].weight) == (1.0, 3.0)
    assert load_config(mixed, ["--data.corpus", "x.txt"]).data.sources == {}
