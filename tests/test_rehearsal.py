"""configs/tiny_marin.yaml, Marin-8B's six phases in miniature (on a smaller model here): the batch, z-loss
and mixture change when the config says, and a run killed at a phase boundary and resumed ends bitwise
equal to the run that was not killed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.config_io import load_config
from meltemi.trainer.plan.phases import phases
from meltemi.trainer.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
# Both tests read one 120-step run (a module fixture): on one worker it trains once, and early: it is long.
pytestmark = [pytest.mark.xdist_group("rehearsal"), pytest.mark.slow]
BOUNDARY = 96  # Starling begins: z-loss on here, the batch raised at the next step, a new mixture


@pytest.fixture(scope="module")
def rehearsal(small_corpus, tmp_path_factory):
    """The rehearsal's config on the tests' small tokenizer and model (its phases, batches, z-loss, mixtures,
    EMA and eval set as written), without task evaluations or exports; checkpoints at each phase boundary.
    Two batches of the eval set per evaluation, not all of it (`eval_batches: all`): its ~715 batches, read
    at the start, at the end and for the average, were 60 of the run's 92 seconds (profiled), and no test
    here reads an evaluation's figures (test_tr_eval_sets covers `all`)."""
    cache = tmp_path_factory.mktemp("rehearsal-cache")
    return load_config(ROOT / "configs" / "tiny_marin.yaml", [
        "--model.vocab_size", "384", "--model.hidden_dim", "32", "--model.intermediate_dim", "64",
        "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
        "--model.max_seq_len", "64", "--model.attention", "xla", "--model.cross_entropy", "xla",
        "--model.cross_entropy_block_size", "128", "--data.tokenizer", small_corpus["tokenizer"],
        "--data.seq_len", "32", "--data.cache_dir", str(cache), "--eval.tasks", "[]",
        "--trainer.eval_every", "0", "--trainer.export_every", "null", "--trainer.sample_prompt", "null",
        "--trainer.checkpoint_every", "24", "--trainer.watch.every", "0", "--trainer.log_every", "1",
        "--trainer.eval_batches", "2",
    ])  # fmt: skip


@pytest.fixture(scope="module")
def whole_run(rehearsal, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("rehearsal") / "run"
    Trainer(rehearsal, run_dir, devices=jax.devices()[:1], progress=False).run()
    return run_dir


def records(run_dir: Path) -> dict[int, dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {record["step"]: record for record in lines if "train/loss" in record}


def test_the_phases_change_the_batch_z_loss_and_rate_where_the_config_says(rehearsal, whole_run):
    logged = records(whole_run)
    assert [p.name for p in phases(rehearsal)] == [
        "Kestrel", "Ocelot", "Jellyfish", "Phoenix", "Starling", "Deeper Starling"
    ]  # fmt: skip
    z_loss = {step: logged[step]["train/z_loss"] for step in (BOUNDARY, BOUNDARY + 1)}
    assert z_loss[BOUNDARY] == 0 and z_loss[BOUNDARY + 1] > 0  # step 96 is logged as 97: the first with it
    rates = {step: logged[step + 1]["train/learning_rate"] for step in (0, 47, 48, 87, 119)}
    inv = 5e-3 / ((5e-3 / 5e-4 - 1) * 3 / 4 + 1)  # Kestrel's last step: 3 of its cycle's 4 decay steps done
    jellyfish = 8.5e-3 + (8.5e-4 - 8.5e-3) * 15 / 16
    assert rates == pytest.approx({0: 0.0, 47: inv, 48: 8.5e-3, 87: jellyfish, 119: 8.5e-5}, rel=1e-5)
    assert (whole_run / "checkpoints" / "step-120").is_dir()


def test_a_run_killed_at_a_phase_boundary_and_resumed_ends_bitwise_equal(rehearsal, whole_run, tmp_path):
    resumed = tmp_path / "run"
    shutil.copytree(whole_run, resumed)
    for later in sorted((resumed / "checkpoints").glob("step-*")):
        if int(later.name.split("-")[1]) > BOUNDARY:
            shutil.rmtree(later)
    summary = Trainer(rehearsal, resumed, devices=jax.devices()[:1], progress=False).run()
    assert summary.resumed_from is not None and summary.resumed_from.name == f"step-{BOUNDARY}"
    digests = [
        inspect_checkpoint(run / "checkpoints" / "step-120").state_digest for run in (resumed, whole_run)
    ]
    assert digests[0] == digests[1]
    after = records(resumed)
    assert {step: after[step]["train/loss"] for step in range(BOUNDARY + 1, 121)} == {
        step: records(whole_run)[step]["train/loss"] for step in range(BOUNDARY + 1, 121)
    }
    assert np.isfinite(after[120]["train/loss"])
