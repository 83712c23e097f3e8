"""apps/ with a run in object storage (the S3 server on loopback): export and sampling read a run directory
in a bucket, the export goes to a bucket, and a bad URL is one line before any work.

The run is trained in process (``Trainer`` on the run URL, as ``apps/pretrain.py --run-dir s3://...``
does); the apps run as subprocesses with the server's standard environment (``AWS_ENDPOINT_URL`` and keys).
"""

import jax
import pytest

from meltemi.datastore.storage import Directory
from meltemi.trainer.trainer import Trainer
from tests.app_runs import SMALL, app


def test_export_and_sample_read_a_run_in_a_bucket_and_export_into_one(s3, small_config, tmp_path):
    bucket = s3.make_bucket()
    run = f"s3://{bucket}/runs/tiny"
    Trainer(small_config, run, devices=jax.devices()[:1], progress=False).run()

    exported = app("export_hf.py", "--checkpoint", run, "--out", f"s3://{bucket}/hf/tiny", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert f"exported {run}/checkpoints/step-6 to s3://{bucket}/hf/tiny" in exported.stdout
    objects = set(Directory(f"s3://{bucket}/hf/tiny").list())
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= objects
    assert Directory(f"s3://{bucket}/hf/tiny").read_bytes("tokenizer.json") == Directory(run).read_bytes(
        "tokenizer.json"
    )
    local = app("export_hf.py", "--checkpoint", run, "--out", "hf", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    assert (tmp_path / "hf" / "model.safetensors").read_bytes() == Directory(
        f"s3://{bucket}/hf/tiny"
    ).read_bytes("model.safetensors")

    sampled = app("sample.py", "--checkpoint", run, "--prompt", "def ", "--max-new-tokens", "8",
                  "--temperature", "0", cwd=tmp_path)  # fmt: skip
    assert sampled.returncode == 0 and sampled.stdout.strip(), sampled.stderr
    assert f"{run}/checkpoints/step-6: " in sampled.stderr


@pytest.mark.parametrize("name", ["sample.py", "export_hf.py"])
def test_a_bad_bucket_url_is_one_line_before_any_work(s3, tmp_path, name):
    bucket = s3.make_bucket()
    if name == "sample.py":
        args = ["--checkpoint", "s3://absent-bucket/run", "--prompt", "x"]
        said = "error: s3://absent-bucket/run"
    else:
        args = ["--checkpoint", str(tmp_path / "nothing"), "--out", "s3://absent-bucket/hf"]
        said = "error: s3://absent-bucket/hf: writing a probe object failed: the bucket 'absent-bucket'"
    result = app(name, *args, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(said) and result.stderr.count("\n") == 1, result.stderr
    assert "absent-bucket" in result.stderr and Directory(f"s3://{bucket}").list() == []


def test_pretrain_trains_and_resumes_a_run_directory_in_a_bucket(s3, with_default_corpus):
    """The issue's command: ``apps/pretrain.py --run-dir s3://...`` trains, resumes from the bucket, and a
    bucket that is not there is one line before any work."""
    cwd = with_default_corpus
    url = f"s3://{s3.make_bucket()}/runs/tiny"
    first = app("pretrain.py", *SMALL, "--trainer.num_train_steps", "4", "--run-dir", url, cwd=cwd)
    assert first.returncode == 0, first.stderr
    assert f"last checkpoint: {url}/checkpoints/step-4" in first.stdout
    second = app("pretrain.py", *SMALL, "--trainer.num_train_steps", "6", "--optimizer.extension", "tail",
                 "--run-dir", url, cwd=cwd)  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert f"resuming from {url}/checkpoints/step-4" in second.stderr
    assert "steps: 6   tokens: 3,072 in all" in second.stdout
    run = Directory(url)
    assert run.exists("checkpoints/step-6/COMMITTED") and run.exists("config.yaml") and run.exists("loss.png")
    assert not (cwd / "s3:").exists() and not (cwd / "runs").exists()  # no URL turned into a local path
    absent = app("pretrain.py", *SMALL, "--run-dir", "s3://absent-bucket/run", cwd=cwd)
    assert absent.returncode == 1
    assert absent.stderr.strip().splitlines()[-1].startswith("error: ") and "absent-bucket" in absent.stderr
    assert len(absent.stderr.strip().splitlines()) == 1, absent.stderr
