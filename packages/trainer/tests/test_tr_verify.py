"""Auditable checkpoints: every checkpoint of a run verifies (its arrays, its state digest, its data
position, its tokenizer), and one whose values, data position or tokenizer changed is named with what."""

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import zarr

from meltemi.trainer.checkpoint.verify import verify_run
from meltemi.trainer.errors import CheckpointError
from meltemi.trainer.trainer import Trainer


@pytest.fixture
def audited_run(make_config, shared, tmp_path) -> Path:
    """A finished 4-step run with checkpoints at steps 2 and 4 (trained once per session), copied."""

    def build(root):
        config = make_config("--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "2",
                             "--trainer.keep_every", "2")  # fmt: skip
        Trainer(config, root / "run", devices=jax.devices()[:1], progress=False).run()

    shutil.copytree(shared.get("verify-run", build) / "run", tmp_path / "run")
    return tmp_path / "run"


def test_every_checkpoint_of_a_run_verifies(audited_run):
    report = verify_run(audited_run)
    assert [(c.step, c.state, c.data, c.ok) for c in report.checkpoints] == [
        (4, "match", "match", True),
        (2, "match", "match", True),
    ], report.describe()
    assert report.ok and report.checkpoints[0].state_digest != report.checkpoints[1].state_digest


def test_a_checkpoint_whose_values_were_rewritten_is_named(audited_run):
    """A rewrite through zarr-python keeps every chunk's checksum valid: only the fingerprint notices."""
    array = zarr.open_array(audited_run / "checkpoints" / "step-4" / "model.norm.weight", mode="r+")
    array[0] = np.float32(array[0]) + 1
    report = verify_run(audited_run)
    newest, older = report.checkpoints
    assert not report.ok and (newest.state, older.state) == ("differs", "match")
    assert "array model.norm.weight: fingerprint" in newest.describe(), newest.describe()
    assert "step-4: state differs" in report.describe()


def test_a_checkpoint_with_a_flipped_byte_is_unreadable(audited_run):
    chunk = audited_run / "checkpoints" / "step-2" / "model.embed_tokens.weight" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    newest, older = verify_run(audited_run).checkpoints
    assert newest.ok and older.state == "unreadable"
    assert "array model.embed_tokens.weight does not read back" in older.describe()


def test_a_data_position_that_does_not_reproduce_is_named(audited_run):
    manifest_path = audited_run / "checkpoints" / "step-2" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["config"]["trainer"]["seed"] = 1  # the stores and the mixture now give other batches
    manifest_path.write_text(json.dumps(manifest))
    newest, older = verify_run(audited_run).checkpoints
    assert newest.data == "match" and older.data == "differs"
    assert "the batch of step 2 hashes to" in older.describe()


def test_a_changed_tokenizer_copy_is_named(audited_run):
    copy = audited_run / "tokenizer.json"
    copy.write_text(copy.read_text() + " ")
    report = verify_run(audited_run)
    assert not report.ok and all(
        "but the checkpoint was trained with" in c.describe() for c in report.checkpoints
    )


def test_a_location_without_checkpoints_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"empty holds no checkpoint"):
        verify_run(tmp_path / "empty")
