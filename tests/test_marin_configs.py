"""configs/marin_8b.yaml's data and configs/marin_8b_sft.yaml against Marin's recipe: the mixture stages'
weights are recomputed here from the inputs of Marin's formulas (experiments/tootsie/exp600_tootsie.py), so a
number mistyped in the YAML is caught, and the SFT preset is checked against exp1237_starling_sft.py
and the SFT defaults. Loading a config is all these tests do (no JAX program, no store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meltemi.datastore import BatchSchedule
from meltemi.trainer.config_io import load_config

ROOT = Path(__file__).resolve().parents[1]

# Marin's keys -> the sources' names here (/ and - as _).
NEMOTRON_GIB_OR_TIB = {  # experiments/nemotron_cc/tokenize_nemotron.py NEMOTRON_WEIGHTS, the run's version
    "nemotron_cc_hq_actual": 935.43 / 1024,
    "nemotron_cc_hq_synth": 2.72,
    "nemotron_cc_medium_high": 844.51 / 1024,
    "nemotron_cc_medium": 3.38,
    "nemotron_cc_medium_low": 1.54,
    "nemotron_cc_low_actual": 718.06 / 1024,
    "nemotron_cc_low_synth": 642.78 / 1024,
}
DCLM = {"dclm_baseline": 3.8, "starcoderdata": 0.25, "proofpile_2": 0.055}


def _jellyfish() -> dict[str, float]:
    hq = {
        "dolma_algebraic_stack": 11.5 * 1.0,
        "dolma_arxiv": 27.9 * 1.0,
        "dolma_megawika": 4.44 * 1.0,
        "dolma_open_web_math": 5.06 * 1.0,
        "dolma_pes2o": 58.1 * 1.0,
        "dolma_stackexchange": 17.1 * 1.0,
        "dolma_wiki": 3.65 * 1.0,
        "finemath_3_plus": 34.0 * 1.0,
    }
    web = {"dolmino_dclm": 700.0 * 1.0, "starcoderdata": 230.0 * 0.1}
    total_hq, total_web = sum(hq.values()), sum(web.values())
    return {
        **{name: 30.0 * count / total_hq for name, count in hq.items()},
        **{name: 70.0 * count / total_web for name, count in web.items()},
    }


def _starling() -> dict[str, float]:
    hq = {
        "starcoderdata": 0.25,
        "proofpile_2": 0.25,
        "dolmino_flan": 0.017 * 10,
        "dolmino_pes2o": 0.0581 * 5,
        "dolmino_stackexchange": 0.0171 * 5,
        "dolmino_wiki": 0.00365 * 5,
        "all_math": 0.00422 * 10,
        "arxiv_markdownified": 0.0581 * 5,
        "stackexchange_custom": 0.0171 * 5,
        "wikipedia_markdown": 0.00365 * 5,
        "medu_science_qa": 0.0012 * 5,
        "finemath_3_plus": 0.034 * 5,
    }
    total_hq, total_nemotron = sum(hq.values()), sum(NEMOTRON_GIB_OR_TIB.values())
    return {
        **{name: v * 0.7 / total_nemotron for name, v in NEMOTRON_GIB_OR_TIB.items()},
        **{name: v * 0.3 / total_hq for name, v in hq.items()},
    }


MARIN_STAGES = [  # exp600's starling_cooldown_mixture weights_list, which Deeper Starling keeps
    (0, DCLM),
    (740_500, _jellyfish()),
    (820_000, {**DCLM, **NEMOTRON_GIB_OR_TIB, "starcoderdata": 0.25}),
    (822_000, {**NEMOTRON_GIB_OR_TIB, "starcoderdata": 0.25}),
    (1_320_000, _starling()),
]


@pytest.fixture(scope="module")
def marin():
    return load_config(ROOT / "configs" / "marin_8b.yaml")


@pytest.fixture(scope="module")
def sft():
    return load_config(ROOT / "configs" / "marin_8b_sft.yaml")


def test_the_8b_stages_are_marins_weights_at_marins_steps(marin):
    stages = [(stage.start_step, dict(stage.weights)) for stage in marin.data.stages]
    assert [step for step, _ in stages] == [step for step, _ in MARIN_STAGES]
    for (step, written), (_, computed) in zip(stages, MARIN_STAGES, strict=True):
        assert written.keys() == computed.keys(), step
        for name, weight in computed.items():
            assert written[name] == weight, (step, name)  # every digit: the YAML holds the floats' repr


def test_the_8b_stages_shares_are_the_ones_marin_reports(marin):
    """Starling: 70% Nemotron-CC, 30% the rest (exp600's own sanity check); Jellyfish: 30% high quality."""
    starling = marin.data.stages[-1].weights
    nemotron = sum(w for name, w in starling.items() if name.startswith("nemotron_cc_"))
    assert nemotron / sum(starling.values()) == pytest.approx(0.7, abs=1e-12)
    jellyfish = marin.data.stages[1].weights
    web = jellyfish["dolmino_dclm"] + jellyfish["starcoderdata"]
    assert web / sum(jellyfish.values()) == pytest.approx(0.7, abs=1e-12)


def test_every_8b_source_is_weighed_and_built_from_raw_files_in_the_bucket(marin):
    data = marin.data
    weighed = set().union(*(stage.weights for stage in data.stages))
    assert weighed == set(data.sources)
    for name, source in data.sources.items():
        assert source.store == f"gs://YOUR-BUCKET/stores/{name}"
        assert source.build_from and all(p.startswith("gs://YOUR-BUCKET/raw/") for p in source.build_from)
        assert all(p.endswith("/") for p in source.build_from), name  # a bucket prefix is a folder
    assert data.sources["starcoderdata"].text_field == "content"
    assert data.mixture_block_size == 2048


@pytest.mark.parametrize(
    "batch_sizes",
    [1024, [(0, 1024), (660_001, 3072), (1_320_001, 4096)]],  # the preset's, and Marin's batch schedule
    ids=["constant-1024", "marin-schedule"],
)
def test_every_8b_stage_starts_a_mixture_block(marin, batch_sizes):
    """The trainer refuses a stage whose first sequence is not a block's first (data.run_data)."""
    schedule = BatchSchedule(batch_sizes)
    for stage in marin.data.stages:
        assert schedule.first_row(stage.start_step) % marin.data.mixture_block_size == 0, stage.start_step


def test_the_8b_sft_preset_is_exp1237_on_a_v4_128(sft, marin):
    o, t, d = sft.optimizer, sft.trainer, sft.data
    assert sft.model.model_copy(update={"z_loss_weight": 0.0}) == marin.model.model_copy(
        update={"z_loss_weight": 0.0}
    )  # the base's shape (its z-loss is the pretraining's own)
    assert sft.model.z_loss_weight == 0.0
    from meltemi.trainer.plan.phases import learning_rate_at

    warmup = int(0.03 * 10_228)  # Levanter's warmup 0.03, then decay 0.0: the peak to the end
    rates = [learning_rate_at(sft, step) for step in (0, 153, warmup, 10_227)]
    assert rates == pytest.approx([0.0, 0.5e-4, 1e-4, 1e-4], rel=1e-6)
    assert (o.weight_decay, o.max_grad_norm) == (0.0, 1.0)
    assert d.held_out == "none" and list(d.eval_sets) == ["paloma_c4_en"]  # nothing held out, as Marin
    assert (t.global_batch_size, t.num_train_steps, d.seq_len) == (128, 10_228, 4096)
    assert (sft.hardware.chip, sft.hardware.devices) == ("TPU v4", 64)
    assert d.mixture_block_size == 2048
    base = t.initialize_from
    assert base.path == "gs://YOUR-BUCKET/runs/marin-8b/hf/step-1420000"
    assert base.parameters_only and base.reset_step
    assert {name: s.weight for name, s in d.sources.items()} == {
        "tulu3_sft_mixture": 939343, "smoltalk": 1043917, "natural_reasoning": 1145824,
        "verifiable_math": 777457, "dolphin_r1_reasoning": 585418, "dolphin_r1_nonreasoning": 214318,
        "openthoughts_math": 89120, "acecode": 87149, "bespoke_stratos": 16710,
    }  # fmt: skip
