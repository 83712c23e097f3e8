"""Shared fixtures: a small tokenizer and token store of standard-library files, and small run configs."""

from pathlib import Path

import pytest

from meltemi.trainer.config_io import load_config

VOCAB = 384


@pytest.fixture(scope="session")
def corpus(small_corpus) -> dict[str, str]:
    """A tokenizer and a store of 120 small stdlib modules (about 150k tokens; the root conftest's, built
    once per session)."""
    return small_corpus


@pytest.fixture(scope="session")
def make_config(corpus):
    """A tiny run config over the test store, with overrides as dotted command-line words (a session
    fixture, so that a module's fixtures can build their model or run once)."""

    def make(*overrides: str):
        base = [
            "--model.vocab_size", str(VOCAB), "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
            "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
            "--model.max_seq_len", "64", "--model.attention", "xla", "--model.cross_entropy", "xla",
            "--model.cross_entropy_block_size", "128", "--model.remat", "none",
            "--data.tokenizer", corpus["tokenizer"],
            "--data.sources", f"{{py: {{store: {corpus['store']}}}}}",
            "--data.seq_len", "32", "--data.eval_fraction", "0.05", "--data.mixture_block_size", "16",
            "--trainer.num_train_steps", "6", "--trainer.global_batch_size", "16", "--trainer.log_every", "2",
            "--trainer.eval_every", "0", "--trainer.eval_batches", "2", "--trainer.compute_dtype", "float32",
            "--trainer.mesh.data", "1", "--optimizer.learning_rate", "1e-2", "--optimizer.warmup_steps", "1",
            "--trainer.watch.every", "0",  # the norms cost every compile; test_tr_norms turns them on
            "--trainer.plots", "false",  # matplotlib: 0.1-0.5 CPU-s a run; the plots' tests turn it on
        ]  # fmt: skip
        return load_config(None, [*base, *overrides])

    return make


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def base(make_config, shared) -> Path:
    """A 2-step pretraining run of the tests' small model, the base fine-tuning tests start from (its
    tokenizer has the chat template's tokens); built once per session."""
    import jax

    from meltemi.trainer.trainer import Trainer

    config = make_config("--trainer.num_train_steps", "2", "--trainer.checkpoint_every", "2")

    def build(root: Path) -> None:
        Trainer(config, root / "run", devices=jax.devices()[:1], progress=False).run()

    return shared.get("sft-base", build) / "run"


@pytest.fixture
def chat_data(shared) -> Path:
    """Conversations about the functions of a few stdlib modules, as JSON Lines (built once per session)."""
    from meltemi.datastore import corpora
    from meltemi.datastore.chat.stdlib import stdlib_chat

    files = sorted(corpora.python_stdlib())[:30]
    return shared.get("sft-chat", lambda root: stdlib_chat(root / "chat.jsonl", files=files)) / "chat.jsonl"


@pytest.fixture
def sft_config(make_config, base, chat_data):
    """The tests' small model fine-tuned from a base (``base`` by default) on chat data (``chat_data``)."""
    import json

    def make(*extra: str, base: Path = base, data: Path = chat_data):
        return make_config(
            "--trainer.initialize_from.path", str(base),
            "--data.sources", json.dumps({"chat": {"corpus": str(data), "format": "chat"}}),
            "--data.seq_len", "255", "--model.max_seq_len", "256", "--data.eval_fraction", "0.1",
            "--trainer.global_batch_size", "4", "--trainer.num_train_steps", "2",
            "--trainer.checkpoint_every", "2",
            *extra,
        )  # fmt: skip

    return make


@pytest.fixture(params=["s3", "gcs"])
def bucket(request) -> str:
    """A fresh, empty bucket on each emulator (the S3 server, the GCS emulator): its URL, ``s3://…`` or
    ``gs://…``."""
    server = request.getfixturevalue(request.param)
    return f"{'s3' if request.param == 's3' else 'gs'}://{server.make_bucket()}"
