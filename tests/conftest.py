"""Fixtures shared by the integration tests: a small token store and a small run config over it."""

import dataclasses
import json
import sysconfig
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
        "--trainer.checkpoint_every", "2", "--trainer.log_batch_hashes", "true", "--trainer.watch.every", "0",
        "--trainer.plots", "false",  # matplotlib: 0.5 CPU-s a process; the apps' runs plot
    ])  # fmt: skip


@dataclasses.dataclass(frozen=True)
class FirstRun:
    """The newcomer's first command in an empty directory, ``cwd``: how it ended and what it printed."""

    cwd: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def corpus(self) -> Path:
        """The default corpus it built, where the app finds it (``.cache/meltemi/stdlib-py<v>-v512-r2``)."""
        return self.cwd / ".cache" / "meltemi" / f"stdlib-py{sysconfig.get_python_version()}-v512-r2"

    def link_corpus(self, directory: Path) -> None:
        """Make ``directory`` hold that corpus where the app looks for it (a link: it is only read)."""
        assert (self.corpus / "store" / "manifest.json").exists(), (
            f"the first run built no corpus:\n{self.stderr}"
        )
        (directory / ".cache" / "meltemi").mkdir(parents=True)
        (directory / ".cache" / "meltemi" / self.corpus.name).symlink_to(
            self.corpus, target_is_directory=True
        )


@pytest.fixture(scope="session")
def first_run(shared) -> FirstRun:
    """``apps/pretrain.py`` with the SMALL model for 4 steps in an empty directory, once per session: it
    builds the default corpus (vocabulary 512) and trains ``runs/tiny``. Tests only read it; one that runs
    in it again works in a copy."""
    from tests.app_runs import SMALL, app

    def build(root: Path) -> None:
        (root / "cwd").mkdir()
        done = app("pretrain.py", *SMALL, "--trainer.num_train_steps", "4", cwd=root / "cwd")
        result = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
        (root / "result.json").write_text(json.dumps(result))

    root = shared.get("first-run", build)
    return FirstRun(root / "cwd", **json.loads((root / "result.json").read_text()))


@pytest.fixture
def with_default_corpus(first_run, tmp_path) -> Path:
    """``tmp_path`` holding the default corpus of the SMALL model where the app looks for it, as after a
    first run: the one the session's ``first_run`` built."""
    first_run.link_corpus(tmp_path)
    return tmp_path


# torch and transformers are imported by the tests that use them, not at collection: every xdist worker
# collects every module, and importing both costs each about 2.5 CPU-seconds.
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed: `uv run --group torch pytest`")


@pytest.fixture(scope="module")
def transformers(torch):
    return pytest.importorskip("transformers", reason="transformers is not installed (group interop)")
