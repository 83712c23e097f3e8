"""Runs that live in object storage (an S3 server and a GCS emulator on loopback): the run directory and its
checkpoints in a bucket, resumed from the URL bitwise as from a local directory, exported and sampled from
the bucket; a checkpoint without its COMMITTED marker is invisible; a bad run URL is one line before any
file is written."""

import types

import jax
import pytest

from meltemi.datastore.errors import (
    AccessDeniedError,
    NoSuchBucketError,
    UnknownSchemeError,
    UnreachableError,
)
from meltemi.datastore.storage import Directory, Location, read_object
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.checkpoint.verify import verify_run
from meltemi.trainer.errors import CheckpointError
from meltemi.trainer.generate.generation import sample_checkpoint
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.hf import export_hf
from meltemi.trainer.run.trackers import read_metrics
from meltemi.trainer.trainer import Trainer

# The tests compare against one local reference run (a module fixture, two trainings): one worker trains it.
pytestmark = pytest.mark.xdist_group("trainer-buckets")


def train(config, run_dir, **kwargs):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=kwargs.pop("progress", False)).run()


def checkpointed(make_config, steps: int, *extra: str):
    return make_config("--trainer.num_train_steps", str(steps), "--trainer.checkpoint_every", "2",
                       "--trainer.log_every", "1", "--trainer.log_batch_hashes", "true",
                       "--trainer.keep_every", "2", "--optimizer.extension", "tail", *extra)  # fmt: skip


def arrays(step) -> dict[str, bytes]:
    return {r.name: read_array(step, r).tobytes() for r in inspect_checkpoint(step).arrays}


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory, corpus):
    """The same two sessions (4 steps, then resumed to 6) in a local directory: what the bucket's run must
    equal, bit for bit."""
    from meltemi.trainer.config_io import load_config  # the module-scoped twin of make_config

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    for steps in (4, 6):
        train(load_config(None, _overrides(corpus, steps)), run_dir)
    return run_dir


def _overrides(corpus, steps):
    return [
        "--model.vocab_size", "384", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
        "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
        "--model.max_seq_len", "64", "--model.attention", "xla", "--model.cross_entropy", "xla",
        "--model.cross_entropy_block_size", "128", "--model.remat", "none",
        "--data.tokenizer", corpus["tokenizer"], "--data.sources", f"{{py: {{store: {corpus['store']}}}}}",
        "--data.seq_len", "32", "--data.eval_fraction", "0.05", "--data.mixture_block_size", "16",
        "--trainer.global_batch_size", "16", "--trainer.eval_every", "0", "--trainer.eval_batches", "2",
        "--trainer.compute_dtype", "float32", "--trainer.mesh.data", "1", "--optimizer.learning_rate", "1e-2",
        "--optimizer.warmup_steps", "1", "--trainer.num_train_steps", str(steps),
        "--trainer.checkpoint_every", "2", "--trainer.log_every", "1", "--trainer.log_batch_hashes", "true",
        "--trainer.keep_every", "2", "--optimizer.extension", "tail",
        "--trainer.watch.every", "0",  # as make_config: the norms' conds change the compiled step's bits
    ]  # fmt: skip


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_run_in_a_bucket_trains_resumes_exports_and_samples_like_a_local_one(
    request, server, make_config, local_reference, tmp_path, capsys
):
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/runs/tiny"
    first = train(checkpointed(make_config, 4, "--trainer.plots", "true"), url)
    assert first.steps == 4 and first.last_checkpoint == Location.parse(f"{url}/checkpoints/step-4")
    run = Directory(url)
    names = set(run.list())
    assert {"config.yaml", "metrics.jsonl", "batches.jsonl", "loss.png", "tokenizer.json"} <= names
    assert {"checkpoints/step-2/COMMITTED", "checkpoints/step-4/COMMITTED"} <= names
    assert read_object(first.plot_path)[:4] == b"\x89PNG"
    assert arrays(f"{url}/checkpoints/step-4") == arrays(local_reference / "checkpoints" / "step-4")

    capsys.readouterr()
    second = train(checkpointed(make_config, 6), url, progress=True)
    assert "resuming from" in capsys.readouterr().err
    assert second.resumed_from == Location.parse(f"{url}/checkpoints/step-4") and second.steps == 6
    assert arrays(f"{url}/checkpoints/step-6") == arrays(local_reference / "checkpoints" / "step-6")
    logged = [r["step"] for r in read_metrics(f"{url}/metrics.jsonl") if "train/loss" in r]
    assert logged == [r["step"] for r in read_metrics(local_reference / "metrics.jsonl") if "train/loss" in r]
    assert run.read_bytes("batches.jsonl") == (local_reference / "batches.jsonl").read_bytes()
    assert verify_run(url).ok

    trained = load_model(url)
    assert trained.checkpoint == Location.parse(f"{url}/checkpoints/step-6")
    out = export_hf(
        trained.model, tmp_path / "hf", tokenizer=trained.tokenizer, eos_token=trained.end_of_text.token
    )
    assert (out / "config.json").is_file() and (out / "tokenizer.json").read_bytes() == run.read_bytes(
        "tokenizer.json"
    )
    result, used = sample_checkpoint(url, ["def "], SamplingConfig(8, 0.0, None, None, 0))
    local, _ = sample_checkpoint(local_reference, ["def "], SamplingConfig(8, 0.0, None, None, 0))
    assert used == trained.checkpoint and result.completions[0].text == local.completions[0].text


def test_a_checkpoint_without_its_marker_is_invisible_and_cleaned_up(bucket, make_config, capsys):
    url = f"{bucket}/run"
    train(checkpointed(make_config, 4), url)
    run = Directory(url)
    run.delete("checkpoints/step-4/COMMITTED")  # as if the writer died before its last PUT
    with pytest.raises(Exception, match="not marked complete"):
        inspect_checkpoint(f"{url}/checkpoints/step-4")
    capsys.readouterr()
    summary = train(checkpointed(make_config, 4), url, progress=True)
    err = capsys.readouterr().err
    assert "skipping checkpoint" in err and "step-4" in err and "not marked complete" in err
    assert summary.resumed_from == Location.parse(f"{url}/checkpoints/step-2")
    assert run.exists("checkpoints/step-4/COMMITTED")  # written again, whole, and committed


def test_an_uncommitted_step_left_by_a_killed_writer_is_removed_by_the_next_commit(bucket, make_config):
    url = f"{bucket}/run"
    run = Directory(url)
    run.write_text("checkpoints/step-9/model.norm.weight/c/0", "half a shard")  # a killed attempt's leftovers
    train(checkpointed(make_config, 2), url)
    assert not run.list("checkpoints/step-9/")
    assert run.exists("checkpoints/step-2/COMMITTED")


@pytest.mark.parametrize(
    ("server", "case"),
    [("s3", "unknown scheme"), ("s3", "missing bucket"), ("s3", "wrong credentials"),
     ("s3", "unreachable endpoint"), ("gcs", "missing bucket"), ("gcs", "wrong credentials"),
     ("gcs", "unreachable endpoint")],
)  # fmt: skip
def test_a_bad_run_url_is_one_line_naming_it_before_anything_is_written(
    request, server, case, make_config, monkeypatch
):
    fake = request.getfixturevalue(server)
    scheme, bucket = fake.scheme, fake.make_bucket()
    url, expected = f"{scheme}://{bucket}/run", None
    if case == "unknown scheme":
        url, expected = "hdfs://namenode/run", UnknownSchemeError
    elif case == "missing bucket":
        url, expected = f"{scheme}://{bucket}-absent/run", NoSuchBucketError
    elif case == "wrong credentials":
        if server == "s3":
            monkeypatch.setenv("AWS_ACCESS_KEY_ID", "unknown")
            monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
        expected = AccessDeniedError  # GCS: the emulator requires a token this process does not send
    else:  # the discard port: nothing listens
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")
        monkeypatch.delenv("TENSORSTORE_GCS_HTTP_URL", raising=False)  # the seam sets it from the above
        expected = UnreachableError
    config = checkpointed(make_config, 2)
    if case == "wrong credentials":
        with fake.checking_credentials(), pytest.raises(expected) as caught:
            train(config, url)
    else:
        with pytest.raises(expected) as caught:
            train(config, url)
    message = str(caught.value)
    assert message.startswith(url) and "\n" not in message, message
    for name, value in fake.environ.items():  # the server's own keys and endpoint again, to look
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TENSORSTORE_GCS_HTTP_URL", raising=False)
    assert Directory(f"{scheme}://{bucket}").list() == []  # nothing written: not even the probe stayed


@pytest.fixture
def flaky(request, monkeypatch, quick_retries):
    """A bucket behind a proxy that fails 5% of requests with a 503 (a store under load), as the
    standard environment's endpoint: each test's own server, proxy and bucket URL."""
    from meltemi.datastore.testing import start_faulty_proxy

    server = request.param
    fake = request.getfixturevalue(server)
    proxy = start_faulty_proxy(fake.endpoint, rate=0.05, seed=7)
    monkeypatch.setenv(fake.endpoint_variable, proxy.endpoint)
    yield proxy, f"{fake.bucket_url()}/runs/flaky"
    proxy.stop()


@pytest.mark.parametrize("flaky", ["s3", "gcs"], indirect=True)
def test_transient_storage_errors_are_retried_and_the_run_ends_bitwise_as_a_clean_one(
    flaky, make_config, local_reference, capsys
):
    """Saves, restores and logs meet 503s at random; TensorStore retries them with backoff, the run (4 steps,
    then resumed to 6) ends with the clean local run's bits, and the summary counts the retries."""
    proxy, url = flaky
    first = train(checkpointed(make_config, 4), url)
    config = checkpointed(make_config, 6)
    second = train(config, url)
    failed_in_training = proxy.failed
    assert second.resumed_from == Location.parse(f"{url}/checkpoints/step-4")
    assert arrays(f"{url}/checkpoints/step-6") == arrays(local_reference / "checkpoints" / "step-6")
    assert Directory(url).read_bytes("batches.jsonl") == (local_reference / "batches.jsonl").read_bytes()
    assert 0 < first.storage_retries + second.storage_retries <= failed_in_training  # each one retried
    from meltemi.trainer.cli import report

    shown = max(first, second, key=lambda summary: summary.storage_retries)
    capsys.readouterr()
    report(
        shown,
        config.model_copy(update={"trainer": config.trainer.model_copy(update={"sample_prompt": None})}),
        url,
    )
    assert (
        f"storage: {shown.storage_retries} request(s) retried after transient errors\n"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_persistent_failure_in_the_middle_of_a_save_leaves_no_committed_checkpoint(
    request, server, make_config, local_reference, monkeypatch
):
    """The store refuses every write under step-4 after the first few (permissions revoked mid-save): the
    run stops with one line naming the checkpoint, step-4 is not committed, and the next start resumes
    from step-2 to the clean run's bits."""
    from meltemi.datastore.testing import start_faulty_proxy

    fake = request.getfixturevalue(server)
    proxy = start_faulty_proxy(fake.endpoint)
    url = f"{fake.bucket_url()}/runs/refused"
    monkeypatch.setenv(fake.endpoint_variable, proxy.endpoint)
    if server == "s3":
        step_4 = "/runs/refused/checkpoints/step-4/"
    else:  # an upload names its object in the query, escaped
        step_4 = "name=runs%2Frefused%2Fcheckpoints%2Fstep-4%2F"
    try:
        proxy.refuse(fake.upload_method, step_4, after=3)
        with pytest.raises(CheckpointError) as caught:
            train(checkpointed(make_config, 4), url)
        message = str(caught.value)
        assert (
            message.startswith(f"writing a checkpoint under {url}/checkpoints failed: ")
            and "\n" not in message
        )
        assert "access denied" in message
        run = Directory(url)
        assert run.exists("checkpoints/step-2/COMMITTED") and not run.exists("checkpoints/step-4/COMMITTED")
        proxy.heal()
        resumed = train(checkpointed(make_config, 6), url)
        assert resumed.resumed_from == Location.parse(f"{url}/checkpoints/step-2")
        assert arrays(f"{url}/checkpoints/step-6") == arrays(local_reference / "checkpoints" / "step-6")
    finally:
        proxy.stop()


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_run_directory_in_a_bucket_is_probed_once_per_process(request, server, monkeypatch):
    """The command checks the run directory before building data and the trainer checks it again: one
    probe write between them (each a PUT, a LIST and a DELETE on a cloud's bucket)."""
    import meltemi.datastore.storage.directory as directory_module
    from meltemi.trainer.run_directory import RunDirectory

    probes = []
    real = directory_module.uuid  # a uuid4 names each probe object: counted in this module alone
    counting = types.SimpleNamespace(uuid4=lambda: probes.append(1) or real.uuid4())
    monkeypatch.setattr(directory_module, "uuid", counting)
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/runs/tiny"
    RunDirectory.of(url).check()
    RunDirectory.of(url).check()
    assert len(probes) == 1
    RunDirectory.of(f"{url}-other").check()
    assert len(probes) == 2


def test_a_model_or_run_in_a_gcs_bucket_that_does_not_exist_is_named_as_the_likely_mistake(gcs):
    """A GCS bucket that is not there reads as empty (its listing finds nothing), so reading a model or
    auditing a run there says the bucket may be missing, not only that nothing was found."""
    from meltemi.trainer.checkpoint.trained_model import locate_model

    note = "(or the bucket 'meltemi-no-such-bucket' does not exist: on GCS, a missing bucket reads as empty)"
    with pytest.raises(CheckpointError) as located:
        locate_model("gs://meltemi-no-such-bucket/runs/tiny")
    assert str(located.value) == (
        "gs://meltemi-no-such-bucket/runs/tiny holds no checkpoint (looked for step-N directories) and is no "
        f"Hugging Face model (no config.json) {note}"
    )
    with pytest.raises(CheckpointError) as verified:
        verify_run("gs://meltemi-no-such-bucket/runs/tiny")
    assert str(verified.value).endswith(f"holds no checkpoint (looked for step-N directories) {note}")
