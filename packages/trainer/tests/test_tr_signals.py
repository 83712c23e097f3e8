"""Stopping on a signal: a repeated signal is one request, the stop saves at the very next step boundary,
and the run's summary says how the process should exit (130 after SIGINT, 143 after SIGTERM)."""

import os
import signal
import time

import jax
import pytest

from meltemi.datastore.storage import Location
from meltemi.trainer.run.signals import StopSignals
from meltemi.trainer.trainer import Trainer


def test_a_second_sigint_within_the_window_is_the_same_request():
    with StopSignals(repeat_window_s=60.0) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the same Ctrl-C delivered twice (process group + uv run)
        assert stop.received == "SIGINT"


def test_a_second_sigint_after_the_window_interrupts_at_once():
    with StopSignals(repeat_window_s=0.05) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs between bytecodes of this thread
        assert stop.received == "SIGINT"


def signalled_at(trainer: Trainer, step: int, signum: int) -> None:
    """Make ``trainer`` receive ``signum`` while its loop reads the batch of ``step`` (before dispatching
    it): the state then stands at the boundary ``step``."""
    original = trainer.data.train.iterate

    def iterate(start, stop):
        for index, local in original(start, stop):
            if index == step:
                os.kill(os.getpid(), signum)
            yield index, local

    trainer.data.train.iterate = iterate


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_saves_at_the_next_step_boundary_and_exits_with_the_signals_status(
    make_config, run_dir, signum, status
):
    config = make_config("--trainer.num_train_steps", "10", "--trainer.checkpoint_every", "1000",
                         "--trainer.log_every", "1")  # fmt: skip
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=False)
    signalled_at(trainer, 3, signum)
    summary = trainer.run()
    assert summary.stopped_by == signal.Signals(signum).name
    assert summary.steps == 3, "the stop must save at the boundary it was asked at, not one step later"
    assert summary.last_checkpoint == Location.parse(run_dir / "checkpoints" / "step-3")
    assert summary.exit_status == status


def test_a_finished_run_exits_with_status_zero(make_config, run_dir):
    summary = Trainer(make_config("--trainer.num_train_steps", "2"), run_dir, devices=jax.devices()[:1],
                      progress=False).run()  # fmt: skip
    assert summary.stopped_by is None and summary.exit_status == 0
