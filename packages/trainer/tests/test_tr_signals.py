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

pytestmark = pytest.mark.xdist_group("trainer-signals")  # one worker: the runs share their programs


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


@pytest.mark.parametrize(("later", "abandoned"), [(5.0, True), (0.5, False)])
def test_the_answer_and_the_handler_agree_on_a_second_ctrl_c_whenever_the_handler_runs(later, abandoned):
    """Where a thread answers signals as they arrive, only its clock tells a repeat from a second Ctrl-C:
    here the first call of the clock (the handler's, in a version where each kept its own) says 0 and
    every later one ``later``, so two clocks would disagree about the second Ctrl-C."""
    import threading

    calls = []
    said: list[str] = []
    answered = threading.Event()

    def clock() -> float:
        calls.append(1)
        return 0.0 if len(calls) == 1 else later

    def say(line: str) -> None:
        said.append(line)
        answered.set()

    with StopSignals(repeat_window_s=1.0, clock=clock, say=say, abandoned=lambda: "abandoned") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert answered.wait(10)
        answered.clear()
        interrupted = False
        try:
            os.kill(os.getpid(), signal.SIGINT)
            answered.wait(0.5 if abandoned else 0.3)
            time.sleep(0.2)  # the handler runs between bytecodes of this thread
        except KeyboardInterrupt:
            interrupted = True
    assert stop.received == "SIGINT"
    assert said[0] == "stopping after step 0: saving a checkpoint (press Ctrl-C again to abandon it)"
    assert (said[1:] == ["abandoned"]) is abandoned
    assert interrupted is abandoned


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
    # The stop tests' 10 steps: their compiled programs serve (a 2-step run compiled its own, 0.7 CPU-s).
    summary = Trainer(make_config("--trainer.num_train_steps", "10"), run_dir, devices=jax.devices()[:1],
                      progress=False).run()  # fmt: skip
    assert summary.stopped_by is None and summary.exit_status == 0


def test_a_signal_is_answered_at_once_while_the_main_thread_is_busy_and_a_second_ctrl_c_abandons():
    """The answer comes from a thread the signal itself wakes: it is said while the main thread is still
    inside a long computation that no Python handler can interrupt (a large matrix product here, a step of
    a run)."""
    import threading

    import numpy as np

    said: list[tuple[float, str]] = []
    size = 1400
    a = np.random.default_rng(0).random((size, size))
    with StopSignals(repeat_window_s=0.05, say=lambda line: said.append((time.monotonic(), line)),
                     abandoned=lambda: "abandoned: nothing saved after step-2") as stop:  # fmt: skip
        stop.boundary = 7
        threading.Timer(0.05, os.kill, args=(os.getpid(), signal.SIGINT)).start()
        for _ in range(40):  # long enough that the signal arrives during it (85 ms a product)
            a = a @ a / size
            if said and time.monotonic() > said[0][0] + 0.1:
                break  # answered while still busy: the rest would only spend CPU (3 CPU-s in all)
        busy_until = time.monotonic()
        assert stop.received == "SIGINT"
        assert (
            said
            and said[0][1] == "stopping after step 7: saving a checkpoint (press Ctrl-C again to abandon it)"
        )
        assert said[0][0] < busy_until - 0.05  # said before the computation ended, not after
        # Python's handler runs only when the product in progress returns, which on a loaded machine is just
        # before the loop breaks: the second Ctrl-C comes after the window counted from that moment too.
        time.sleep(0.1)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
    assert said[-1][1] == "abandoned: nothing saved after step-2"


def test_a_second_ctrl_c_says_what_was_saved_and_how_to_resume(make_config, run_dir, monkeypatch, capsys):
    from meltemi.trainer import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "ABANDON_GRACE_S", None)  # the test process must not end itself
    monkeypatch.setattr(StopSignals, "__init__", _no_window(StopSignals.__init__))
    config = make_config("--trainer.num_train_steps", "10", "--trainer.checkpoint_every", "2",
                         "--trainer.log_every", "1")  # fmt: skip
    trainer = Trainer(config, run_dir, devices=jax.devices()[:1], progress=True)
    original = trainer.data.train.iterate

    def iterate(start, stop):  # Ctrl-C, then Ctrl-C again later, both while step 5 runs
        for index, local in original(start, stop):
            if index == 5:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGINT)
            yield index, local

    trainer.data.train.iterate = iterate
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    err = capsys.readouterr().err
    assert "stopping after step 5: saving a checkpoint (press Ctrl-C again to abandon it)" in err
    saved = run_dir / "checkpoints" / "step-4"
    assert f"abandoned at step 5: nothing was saved after {saved}; the same command resumes from it" in err


def _no_window(init):
    def without_window(self, *args, **kwargs):
        init(self, *args, **{**kwargs, "repeat_window_s": 0.0})

    return without_window
