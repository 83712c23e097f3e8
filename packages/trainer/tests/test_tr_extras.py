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
    pytest.importorskip(module, reason=f"the trainer's [{extra}] extra")
    load_config(None, flags)


@pytest.mark.parametrize("needed_by", ["evaluating", "eval.tasks"])
def test_the_harness_without_lm_eval_is_one_error_saying_what_needs_it_and_how_to_install_it(
    monkeypatch, needed_by
):
    from meltemi.trainer.harness.errors import HarnessMissingError
    from meltemi.trainer.harness.loading import require_harness

    monkeypatch.setitem(sys.modules, "lm_eval", None)  # an import of lm_eval now fails as if it were missing
    for name in ("meltemi.trainer.harness.model", "meltemi.trainer.harness.runner"):
        monkeypatch.delitem(sys.modules, name, raising=False)  # imported afresh, as in a new process
    with pytest.raises(HarnessMissingError) as error:
        require_harness(needed_by)
    assert str(error.value) == (
        f"{needed_by} needs lm-evaluation-harness (lm_eval is not installed): "
        "pip install 'meltemi-trainer[eval]'"
    )
