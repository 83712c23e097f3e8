"""A run's schedule read from its config alone: ``--schedule-at`` prints each step's learning rate, batch and
mixture without importing JAX, and the dry run's phase table sums each phase's steps and tokens."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from meltemi.trainer.config import RunConfig
from meltemi.trainer.plan.phases import format_phases, phases

CONFIG = {
    "optimizer": {
        "segments": [
            {"kind": "wsd_s", "start": 0, "end": 60, "name": "A", "peak": 1e-3, "floor": 1e-4, "cycle": 20,
             "warmup": 5, "decay": 0.25, "shape": "inv"},
            {"kind": "linear", "start": 60, "end": 70, "name": "B", "from_lr": 1e-4, "to_lr": 2e-3},
            {"kind": "constant", "start": 70, "end": 90, "name": "B", "lr": 2e-3},
            {"kind": "linear", "start": 90, "end": 100, "name": "C", "from_lr": 2e-3, "to_lr": 2e-5},
        ]
    },
    "trainer": {"num_train_steps": 100, "global_batch_size": [[0, 4], [61, 8]]},
    "data": {
        "seq_len": 16,
        "mixture_block_size": 4,
        "sources": {"web": {"store": "w"}, "code": {"store": "c"}, "math": {"store": "m", "weight": 0.0}},
        "stages": [{"start_step": 0, "weights": {"web": 3, "code": 1}},
                   {"start_step": 80, "weights": {"web": 1, "code": 1, "math": 1}}],
    },
}  # fmt: skip


def _schedule_at(tmp_path, steps: str) -> subprocess.CompletedProcess:
    """``--schedule-at STEPS`` in a fresh interpreter, which then says whether JAX was imported."""
    import yaml

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    script = textwrap.dedent(f"""
        import sys
        from meltemi.trainer.cli import main
        status = main(["--config", {str(path)!r}, "--schedule-at", {steps!r}])
        print("jax imported" if "jax" in sys.modules else "no jax", file=sys.stderr)
        sys.exit(status)
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_schedule_at_prints_each_steps_rate_batch_and_mixture_without_jax(tmp_path):
    result = _schedule_at(tmp_path, "0,19,60,61,85,99")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "no jax"
    assert result.stdout.splitlines() == [
        "step 0 lr 0 batch 4 web=0.75 code=0.25 math=0",
        "step 19 lr 0.000121951227 batch 4 web=0.75 code=0.25 math=0",  # inv: 1e-3 / (9 * 4/5 + 1)
        "step 60 lr 0.000100000063 batch 4 web=0.75 code=0.25 math=0",  # float32 (1e-4 - 2e-3) + 2e-3
        "step 61 lr 0.000290000113 batch 8 web=0.75 code=0.25 math=0",
        "step 85 lr 0.00200000009 batch 8 web=0.333333333 code=0.333333333 math=0.333333333",
        "step 99 lr 0.00021800003 batch 8 web=0.333333333 code=0.333333333 math=0.333333333",
    ]


def test_a_step_outside_the_run_is_one_line_before_anything_is_printed(tmp_path):
    result = _schedule_at(tmp_path, "5,100")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        "error: --schedule-at 100: the run's steps are 0 to 99 (trainer.num_train_steps)"
    )


def test_the_phase_table_merges_a_phases_segments_and_sums_its_tokens():
    config = RunConfig.model_validate(CONFIG)
    table = phases(config)
    assert [(p.name, p.start, p.end, p.batch) for p in table] == [
        ("A", 0, 60, (4, 4)), ("B", 60, 90, (4, 8)), ("C", 90, 100, (8, 8))
    ]  # fmt: skip
    assert [p.tokens for p in table] == [60 * 4 * 16, (4 + 29 * 8) * 16, 10 * 8 * 16]
    assert sum(p.tokens for p in table) == (61 * 4 + 39 * 8) * 16
    assert table[1].learning_rate == pytest.approx((1e-4, 2e-3))
    assert [step for step, _ in table[1].mixtures] == [60, 80]  # the stage that starts inside B
    lines = [re.split(r"\s{2,}", line) for line in format_phases(config).splitlines()]
    assert lines[0] == ["phase", "steps", "tokens", "batch", "learning rate", "mixture"]
    assert lines[2] == ["B", "60-89", "3.78K", "4 -> 8", "0.0001 -> 0.002",
                        "web 75.0%, code 25.0%; from 80: web 33.3%, code 33.3%, math 33.3%"]  # fmt: skip
