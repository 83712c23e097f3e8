"""apps/ with a run in object storage (the S3 server and the GCS emulator on loopback, every test on both):
export and sampling read a run directory in a bucket, the export goes to a bucket (the local export's
bytes, and a bucket prefix that is not empty refused in one line), and a bad URL is one line before any
work.

The run is trained in process (``Trainer`` on the run URL, as ``apps/pretrain.py --run-dir s3://...``
does); the apps run as subprocesses with the server's standard environment (``AWS_ENDPOINT_URL`` and keys,
or ``STORAGE_EMULATOR_HOST``).
"""

import jax
import pytest

from meltemi.datastore.storage import Directory
from meltemi.trainer.trainer import Trainer
from tests.app_runs import SMALL, app


@pytest.fixture(params=["s3", "gcs"])
def scheme(request) -> str:
    """``s3`` or ``gs``, with that server's environment set for the test (and so for the apps it starts)."""
    request.getfixturevalue(request.param)
    return "s3" if request.param == "s3" else "gs"


@pytest.fixture
def bucket(request, scheme) -> str:
    """A new bucket on the test's server."""
    return request.getfixturevalue("s3" if scheme == "s3" else "gcs").make_bucket()


def test_export_and_sample_read_a_run_in_a_bucket_and_export_into_one(scheme, bucket, small_config, tmp_path):
    run = f"{scheme}://{bucket}/runs/tiny"
    Trainer(small_config, run, devices=jax.devices()[:1], progress=False).run()

    hf = f"{scheme}://{bucket}/hf/tiny"
    exported = app("export_hf.py", "--checkpoint", run, "--out", hf, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert f"exported {run}/checkpoints/step-6 to {hf}" in exported.stdout
    objects = set(Directory(hf).list())
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= objects
    assert Directory(hf).read_bytes("tokenizer.json") == Directory(run).read_bytes("tokenizer.json")
    local = app("export_hf.py", "--checkpoint", run, "--out", "hf", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    files = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    assert sorted(files) == sorted(objects)  # every file the same, byte for byte
    assert all(Directory(hf).read_bytes(name) == data for name, data in files.items())

    again = app("export_hf.py", "--checkpoint", run, "--out", hf, cwd=tmp_path)
    assert again.returncode == 1 and again.stderr == f"error: {hf}: already holds objects; choose another\n"
    assert all(Directory(hf).read_bytes(name) == data for name, data in files.items())
    assert set(Directory(hf).list()) == objects  # the target as it was

    sampled = app("sample.py", "--checkpoint", run, "--prompt", "def ", "--max-new-tokens", "8",
                  "--temperature", "0", cwd=tmp_path)  # fmt: skip
    assert sampled.returncode == 0 and sampled.stdout.strip(), sampled.stderr
    assert f"{run}/checkpoints/step-6: " in sampled.stderr


@pytest.mark.parametrize("name", ["sample.py", "export_hf.py"])
def test_a_bad_bucket_url_is_one_line_before_any_work(scheme, bucket, tmp_path, name):
    if name == "sample.py":
        args = ["--checkpoint", f"{scheme}://absent-bucket/run", "--prompt", "x"]
        said = f"error: {scheme}://absent-bucket/run"
    else:
        args = ["--checkpoint", str(tmp_path / "nothing"), "--out", f"{scheme}://absent-bucket/hf"]
        said = (
            f"error: {scheme}://absent-bucket/hf: writing a probe object failed: the bucket 'absent-bucket'"
        )
    result = app(name, *args, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(said) and result.stderr.count("\n") == 1, result.stderr
    assert "absent-bucket" in result.stderr and Directory(f"{scheme}://{bucket}").list() == []


def test_pretrain_trains_and_resumes_a_run_directory_in_a_bucket(scheme, bucket, with_default_corpus):
    """The issue's command: ``apps/pretrain.py --run-dir s3://...`` trains, resumes from the bucket, and a
    bucket that is not there is one line before any work."""
    cwd = with_default_corpus
    url = f"{scheme}://{bucket}/runs/tiny"
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
    assert not (cwd / f"{scheme}:").exists() and not (cwd / "runs").exists()  # no URL made a local path
    absent = app("pretrain.py", *SMALL, "--run-dir", f"{scheme}://absent-bucket/run", cwd=cwd)
    assert absent.returncode == 1
    assert absent.stderr.strip().splitlines()[-1].startswith("error: ") and "absent-bucket" in absent.stderr
    assert len(absent.stderr.strip().splitlines()) == 1, absent.stderr
