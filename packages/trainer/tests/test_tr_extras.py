"""A tracker turned on without its extra installed is a config error naming the extra, not a bare
ModuleNotFoundError once the run directory has changed."""

import sys

import pytest

from meltemi.trainer import load_config
from meltemi.trainer.errors import ConfigError

TRACKERS = [
    ("tensorboardX", "tensorboard", ["--trainer.trackers.tensorboard", "true"]),
    ("wandb", "wandb", ["--trainer.trackers.wandb", "{mode: offline}"]),
]


@pytest.mark.parametrize(("module", "extra", "flags"), TRACKERS, ids=[extra for _, extra, _ in TRACKERS])
def test_a_tracker_without_its_extra_names_the_extra(monkeypatch, module, extra, flags):
    monkeypatch.setitem(sys.modules, module, None)  # find_spec reports a module mapped to None as missing
    with pytest.raises(ConfigError) as error:
        load_config(None, flags)
    assert f"{extra} is on but {module} is not installed" in str(error.value)
    assert f"pip install 'meltemi-trainer[{extra}]'" in str(error.value)


@pytest.mark.parametrize(("module", "extra", "flags"), TRACKERS, ids=[extra for _, extra, _ in TRACKERS])
def test_a_tracker_off_needs_no_extra(monkeypatch, module, extra, flags):
    monkeypatch.setitem(sys.modules, module, None)
    trackers = load_config(None, []).trainer.trackers
    assert not trackers.tensorboard and trackers.wandb is None


@pytest.mark.parametrize(("module", "extra", "flags"), TRACKERS, ids=[extra for _, extra, _ in TRACKERS])
def test_a_tracker_with_its_extra_installed_is_accepted(module, extra, flags):
    pytest.importorskip(module, reason=f"{module} is not installed: the trainer's [{extra}] extra")
    load_config(None, flags)


HARNESS_MISSING = """
import sys
sys.modules["lm_eval"] = None  # an import of lm_eval now fails as if it were not installed
from meltemi.trainer.harness.errors import HarnessMissingError
from meltemi.trainer.harness.loading import require_harness
try:
    require_harness(sys.argv[1])
except HarnessMissingError as error:
    print(error)
"""


@pytest.mark.parametrize("needed_by", ["evaluating", "eval.tasks"])
def test_the_harness_without_lm_eval_is_one_error_saying_what_needs_it_and_how_to_install_it(needed_by):
    """In a fresh interpreter (this one may hold lm-eval's modules already)."""
    import os
    import subprocess

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", HARNESS_MISSING, needed_by],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.stdout.strip() == (
        f"{needed_by} needs lm-evaluation-harness (lm_eval is not installed): "
        "pip install 'meltemi-trainer[eval]'"
    ), done.stderr
