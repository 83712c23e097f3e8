"""Fixtures shared by the integration tests: a small token store and a small run config over it."""

from pathlib import Path

import pytest

from meltemi.trainer.config_io import load_config


@pytest.fixture(scope="module")
def small_config(small_corpus):
    """A tiny Llama run over 120 small stdlib modules (the root conftest's store): 6 steps of 16 x 32
    tokens, checkpoints every 2, batch hashes logged (to compare runs across process counts)."""
    tokenizer, store = small_corpus["tokenizer"], small_corpus["store"]
    return load_config(None, [
        "--model.vocab_size", "384", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
        "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
        "--model.attention", "xla", "--model.cross_entropy", "xla", "--model.cross_entropy_block_size", "128",
        "--data.tokenizer", str(tokenizer), "--data.sources", f"{{py: {{store: {store}}}}}",
        "--data.seq_len", "32", "--data.eval_fraction", "0.05", "--data.mixture_block_size", "16",
        "--trainer.num_train_steps", "6", "--trainer.global_batch_size", "16", "--trainer.log_every", "1",
        "--trainer.eval_every", "0", "--trainer.eval_batches", "1", "--trainer.compute_dtype", "float32",
        "--trainer.checkpoint_every", "2", "--trainer.log_batch_hashes", "true",
    ])  # fmt: skip


from meltemi.datastore.testing import gcs, gcs_server, s3, s3_server  # noqa: E402, F401  (server fixtures)


@pytest.fixture
def with_default_corpus(shared, tmp_path) -> Path:
    """``tmp_path`` holding the default corpus of the SMALL model (vocabulary 512) where the app looks for it
    (``.cache/meltemi/stdlib-py<version>-v512``), as after a first run; built once per session."""
    import sysconfig

    from meltemi.datastore import corpora

    name = f"stdlib-py{sysconfig.get_python_version()}-v512"
    built = shared.get(name, lambda root: corpora.stdlib_corpus(root / name, 512, progress=False)) / name
    (tmp_path / ".cache" / "meltemi").mkdir(parents=True)
    (tmp_path / ".cache" / "meltemi" / name).symlink_to(built, target_is_directory=True)
    return tmp_path
