"""A run directory is self-contained: it keeps a copy of its tokenizer (its hash in every checkpoint), so
export and sampling work from any directory once the original is gone; one end-of-text rule, recorded in
the checkpoint, serves both."""

import importlib.util
import json
import os
import shutil
from pathlib import Path

import jax
import pytest
from tokenizers import Tokenizer

from meltemi.trainer.checkpoint.format import Manifest
from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.data.run_tokenizer import copy_into_run, end_of_text, file_sha256, tokenizer_at
from meltemi.trainer.errors import ConfigError
from meltemi.trainer.hf.tokenizer_files import special_tokens
from meltemi.trainer.trainer import Trainer

APPS = Path(__file__).resolve().parents[3] / "apps"


def app(name: str):
    spec = importlib.util.spec_from_file_location(f"app_{name}", APPS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture
def trained_elsewhere(make_config, corpus, tmp_path, monkeypatch) -> Path:
    """A 2-step run trained from ``tmp_path/train`` with a tokenizer named by a relative path, which is
    then deleted; the test's working directory is another one."""
    where = tmp_path / "train"
    (where / "tok").mkdir(parents=True)
    shutil.copyfile(corpus["tokenizer"], where / "tok" / "tokenizer.json")
    monkeypatch.chdir(where)
    config = make_config("--trainer.num_train_steps", "2", "--data.tokenizer", "tok/tokenizer.json")
    Trainer(config, "run", devices=jax.devices()[:1], progress=False).run()
    shutil.rmtree(where / "tok")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return where / "run"


def test_export_and_sample_use_the_runs_copy_from_another_directory(trained_elsewhere, corpus, capsys):
    run = Path(os.path.relpath(trained_elsewhere))  # ../train/run: climbing paths read back too
    manifest = Manifest.from_json((run / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert manifest.tokenizer.sha256 == file_sha256(corpus["tokenizer"])
    assert (run / manifest.tokenizer.file).read_bytes() == Path(corpus["tokenizer"]).read_bytes()
    assert app("export_hf")(["--checkpoint", str(run), "--out", "hf"]) == 0, capsys.readouterr().err
    assert (Path("hf") / "tokenizer.json").read_bytes() == Path(corpus["tokenizer"]).read_bytes()
    assert app("sample")(["--checkpoint", str(run), "--prompt", "def ", "--max-new-tokens", "3"]) == 0, (
        capsys.readouterr().err
    )


def test_a_changed_copy_of_the_runs_tokenizer_is_one_clear_error(trained_elsewhere, capsys):
    copy = trained_elsewhere / "tokenizer.json"
    copy.write_text(copy.read_text() + " ")
    assert app("export_hf")(["--checkpoint", str(trained_elsewhere), "--out", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {copy}: sha256 ") and "but the checkpoint was trained with" in err
    assert len(err.strip().splitlines()) == 1 and not Path("hf").exists()


def test_the_end_of_text_token_is_recorded_and_export_and_sampling_use_it(trained_elsewhere):
    run = trained_elsewhere
    store = json.loads((Path(load_model(run).config.data.sources["py"].store) / "manifest.json").read_text())
    manifest = Manifest.from_json((run / "checkpoints" / "step-2" / "manifest.json").read_text())
    assert manifest.end_of_text.id == store["tokenizer"]["eos_id"] is not None
    assert load_model(run).end_of_text == manifest.end_of_text
    assert app("export_hf")(["--checkpoint", str(run), "--out", "hf"]) == 0
    assert (
        json.loads(Path("hf/generation_config.json").read_text())["eos_token_id"] == manifest.end_of_text.id
    )


def test_export_and_sampling_agree_on_a_tokenizer_with_several_special_tokens(corpus, tmp_path):
    tokenizer = Tokenizer.from_file(corpus["tokenizer"])
    tokenizer.add_special_tokens(["<pad>", "<|im_start|>"])
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    found = end_of_text(path)
    assert found.token == "<|endoftext|>" and found.id == tokenizer.token_to_id("<|endoftext|>")
    exported = special_tokens(path)
    assert (exported.eos_token, exported.eos_token_id) == (found.token, found.id)


def test_resuming_with_another_tokenizer_is_refused_and_leaves_the_runs_copy(corpus, tmp_path):
    run = tmp_path / "run"
    kept = copy_into_run(corpus["tokenizer"], run, resumed=False)
    other = tmp_path / "other.json"
    other.write_text(Path(corpus["tokenizer"]).read_text() + " ")
    with pytest.raises(
        ConfigError, match=r"^data.tokenizer: .*other.json \(sha256 .*\) is not the tokenizer"
    ):
        copy_into_run(other, run, resumed=True)
    assert file_sha256(run / "tokenizer.json") == kept.sha256
    assert copy_into_run(other, run, resumed=False).sha256 == file_sha256(other)  # a new run: replaced


def test_a_tokenizer_in_a_bucket_serves_every_stage_as_the_local_file_does(
    bucket, make_config, corpus, tmp_path
):
    """Named by a bucket URL (s3:// or gs://), the tokenizer opens the run's stores, is copied into the run,
    and tokenizes for sampling, evaluation, the end-of-text rule and the export, as the same file on disk
    does; nothing of it lands on the local disk but the run's own copy."""
    from meltemi.datastore.storage import Directory
    from meltemi.trainer.generate.generation import generate
    from meltemi.trainer.generate.sampling import SamplingConfig
    from meltemi.trainer.hf import export_hf

    local = corpus["tokenizer"]
    there = Directory(f"{bucket}/tokenizers")
    there.write_bytes("tokenizer.json", Path(local).read_bytes())
    url = there.where("tokenizer.json")
    config = make_config("--trainer.num_train_steps", "2", "--data.tokenizer", url)
    Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False).run()
    assert (tmp_path / "run" / "tokenizer.json").read_bytes() == Path(local).read_bytes()

    model = load_model(tmp_path / "run", devices=jax.devices()[:1]).model
    settings = SamplingConfig(6, 0.0, None, None, 0)
    texts = [generate(model, ["def "], settings, tokenizer=t).completions[0].text for t in (url, local)]
    assert texts[0] == texts[1]
    assert tokenizer_at(url).get_vocab() == Tokenizer.from_file(local).get_vocab()
    assert end_of_text(url) == end_of_text(local) and special_tokens(url) == special_tokens(local)
    out = export_hf(model, f"{there.where()}/hf", tokenizer=url)
    assert Directory(out).read_bytes("tokenizer.json") == Path(local).read_bytes()
    assert sorted(p.name for p in tmp_path.rglob("*.json") if "run" not in p.parts) == []


def test_the_evaluation_harness_reads_a_tokenizer_in_a_bucket_as_the_local_file(bucket, corpus):
    """The harness's model (the `eval` group's lm-eval) takes a tokenizer named by a bucket URL as it takes
    the same file on disk."""
    pytest.importorskip("lm_eval", reason="lm-eval is not installed: see the `eval` group in pyproject.toml")
    from meltemi.datastore.storage import Directory
    from meltemi.trainer.harness.model import read_tokenizer

    local = corpus["tokenizer"]
    there = Directory(f"{bucket}/tokenizers")
    there.write_bytes("tokenizer.json", Path(local).read_bytes())
    read = read_tokenizer(there.where("tokenizer.json"), "here")
    assert read.get_vocab() == Tokenizer.from_file(local).get_vocab()
