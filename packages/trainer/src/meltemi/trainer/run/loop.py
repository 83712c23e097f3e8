"""One pass of the step loop: decide, dispatch, report one step behind, evaluate, checkpoint.

Before dispatching each step the processes agree on what the boundary they stand at needs: a stop (a
signal reached one of them: save here and return), a scheduled checkpoint, or the commit of a checkpoint
every process has finished writing. Deciding before the dispatch,
not after it, is what makes a stop save at the boundary it was asked at: once a step is dispatched its
input state is gone (the step donates it).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable

import jax

from meltemi.datastore import BatchLoader
from meltemi.datastore.storage import Appender, Location
from meltemi.trainer.checkpoint.checkpointer import Checkpointer
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import NonFiniteError
from meltemi.trainer.run.hf_exports import HfExports
from meltemi.trainer.run.profile_trace import ProfileTrace
from meltemi.trainer.run.progress import TrainingProgress
from meltemi.trainer.run.signals import StopSignals
from meltemi.trainer.run.startup import StartupClock
from meltemi.trainer.run.trackers import BUCKET_FLUSH_SECONDS, Trackers
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step.distributed import agree, batch_hash
from meltemi.trainer.step.evaluation import Evaluation
from meltemi.trainer.step.flops import flops_per_token, peak_flops_per_device
from meltemi.trainer.step.program import TrainProgram
from meltemi.trainer.step.train_step import StepMetrics, TrainState


@dataclasses.dataclass(frozen=True)
class LoopParts:
    """What the step loop drives a run with, each typed, none of them the ``Trainer``: the run's ``config``,
    where it is (``directory``; ``primary``: the first process, which writes the records), its training
    ``batches`` (this process's rows), the compiled train step (``program``), its ``evaluation`` and its
    Hugging Face ``exports``, and its startup ``clock``; and what this session records and says through:
    ``trackers``, ``progress``, the ``checkpointer``, and the ``stop`` signals."""

    config: RunConfig
    directory: RunDirectory
    primary: bool
    batches: BatchLoader
    program: TrainProgram
    evaluation: Evaluation
    exports: HfExports
    clock: StartupClock
    trackers: Trackers
    progress: TrainingProgress
    checkpointer: Checkpointer
    stop: StopSignals


@dataclasses.dataclass(frozen=True)
class LoopOutcome:
    """How the loop ended: the ``state`` it reached, the ``stopped_by`` signal (None: it reached the last
    step), the ``last_checkpoint`` saved (or restored from), this session's ``evaluations`` with their
    steps, and its tokens and tokens per second (evaluations not counted)."""

    state: TrainState
    stopped_by: str | None
    last_checkpoint: Location | None
    evaluations: list[tuple[int, dict[str, float]]]
    session_tokens: int
    tokens_per_second: float


class StepLoop:
    """Train from ``state`` to the last step with ``parts`` (``run`` returns a ``LoopOutcome``): it calls the
    parts and never the run that made them, so the run and the loop meet in ``LoopParts`` alone.

    ``saved`` is the checkpoint the state was restored from (a stop before the first step saves nothing
    new); ``data_note`` says what to warn of, given the hash of a resumed run's first batch (the start's
    ``checkpoint.resume.Start.data_note``: that batch against the one the checkpoint recorded)."""

    def __init__(
        self,
        parts: LoopParts,
        state: TrainState,
        saved: Location | None,
        data_note: Callable[[str], str | None] = lambda _: None,
    ):
        self.parts, self.state, self.data_note = parts, state, data_note
        self.trackers, self.progress = parts.trackers, parts.progress
        self.checkpointer, self.stop = parts.checkpointer, parts.stop
        self.rate = Throughput(parts.config, parts.program.plan.mesh.devices.size)
        self.first_eval: dict[str, float] = {}
        self.last_eval: dict[str, float] = {}
        self.evaluations: list[tuple[int, dict[str, float]]] = []  # this session's, with their steps
        self.last_checkpoint: Location | None = saved
        self.stopped_by: str | None = None
        self.pending: tuple[int, StepMetrics, int] | None = None  # a dispatched step: metrics, rows
        self.batches: Appender | None = None  # batches.jsonl, once the first hash is logged

    def _evaluate(self, step: int, due_only: bool = False) -> dict[str, float]:
        """Evaluate the state of ``step``: everything, or ``due_only`` what is due at that step."""
        self.rate.pause()
        metrics = self.parts.evaluation(self.state, step if due_only else None)
        self.trackers.log(metrics, step=step)
        self.evaluations.append((step, metrics))
        self.rate.resume()
        return metrics

    def _export(self, step: int) -> None:
        """Export the weights of ``step`` (``trainer.export_every``), its time not counted as training's."""
        self.rate.pause()
        self.progress.note(self.parts.exports.export(self.state, step))
        self.rate.resume()

    def _flush(self, force: bool = False) -> None:
        if self.pending is not None:
            self._report(*self.pending, force=force)
            self.pending = None

    def _report(self, step: int, metrics: StepMetrics, rows: int, force: bool = False) -> None:
        """Check a finished step's metrics (one step behind the dispatch, so the device never waits); its
        ``rows`` count towards the throughput of the interval it is reported in."""
        config = self.parts.config.trainer
        self.rate.add(rows)
        values = jax.device_get(dataclasses.replace(metrics, norms=None))
        norms = {}  # trainer.watch's, on the steps that computed them (only those are copied to the host)
        if metrics.norms is not None and bool(metrics.norms.computed):
            norms = jax.device_get(metrics.norms).named()
        if not bool(values.applied):
            if config.nan_policy == "stop":
                raise NonFiniteError(
                    f"step {step}: the loss ({float(values.loss)}) or the gradient norm "
                    f"({float(values.grad_norm)}) is not finite; the update was not applied and the run "
                    "stops (trainer.nan_policy: stop)"
                )
            self.progress.note(
                f"step {step}: non-finite loss or gradient, update skipped (trainer.nan_policy: skip)"
            )
        done = step + 1
        if done % config.log_every and not force:
            if norms:
                self.trackers.log(norms, step=done)
            return
        speed = self.rate.interval()
        record = {
            "train/loss": float(values.loss),
            "train/z_loss": float(values.z_loss),
            "train/grad_norm": float(values.grad_norm),
            "train/learning_rate": float(values.learning_rate),
            "train/skipped": float(not bool(values.applied)),
            "throughput/tokens_per_second": speed.tokens_per_second,
            "throughput/flops_per_second": speed.flops_per_second,
        }
        if speed.mfu is not None:
            record["throughput/mfu"] = speed.mfu
        self.trackers.log({**record, **norms}, step=done)
        self.progress.update(
            done, record["train/loss"], speed.tokens_per_second, speed.mfu, speed.flops_per_second
        )

    def _log_batch_hash(self, step: int, local: dict) -> None:
        """Append the global batch's hash to ``batches.jsonl``: the same for any number of processes."""
        digest = batch_hash(local)
        if self.parts.primary:
            if self.batches is None:
                run = self.parts.directory
                self.batches = Appender(
                    run.files, run.BATCHES, flush_seconds=0.0 if run.is_local else BUCKET_FLUSH_SECONDS
                )
            self.batches.append(json.dumps({"step": step, "hash": digest}))

    def _flush_records(self) -> None:
        """Write the metrics and batch hashes still waiting (a bucket's run directory batches them)."""
        self.trackers.flush()
        if self.batches is not None:
            self.batches.flush()

    def _checkpoint(self, local: dict | None, wait: bool = False) -> None:
        """Save the state with its data position (the hash of ``local``, the batch of the state's step; the
        data's end when None); the step's metrics are logged first (the save waits for the step anyway), so
        a checkpoint never exists without the record reaching its step."""
        self._flush()
        self._flush_records()
        next_batch = None if local is None else batch_hash(local)
        self.last_checkpoint = self.checkpointer.save(self.state, wait=wait, next_batch=next_batch)

    def _final_checkpoint(self) -> None:
        step = int(jax.device_get(self.state.step))
        try:
            local = self.parts.batches.batch(step)
        except IndexError:  # the data ends at the last step
            local = None
        self._checkpoint(local, wait=True)

    def _decide(self, step: int, first: int) -> tuple[str | None, bool]:
        """What every process does at the boundary ``step``: stop (for which signal), or checkpoint."""
        received = self.stop.check(step)
        due = step > first and self.checkpointer.due(step)
        writing = self.checkpointer.writing()
        sigint, sigterm, due, writing = agree([received == "SIGINT", received == "SIGTERM", due, writing])
        if not writing:  # every process has written its shards: commit them (nothing when none is pending)
            self.checkpointer.finish_written()
        return ("SIGTERM" if sigterm else "SIGINT" if sigint else None), due

    def abandoned(self) -> str:
        """What a second Ctrl-C leaves: nothing saved after the last checkpoint, and how to go on."""
        at = self.stop.boundary
        if self.last_checkpoint is None:
            return f"abandoned at step {at}: no checkpoint was saved; the same command starts the run again"
        return (
            f"abandoned at step {at}: nothing was saved after {self.last_checkpoint}; the same command "
            "resumes from it (the steps after it are redone)"
        )

    def _stop_at(self, step: int, first: int, signal_name: str, local: dict) -> None:
        self._flush(force=True)
        if step > first or self.last_checkpoint is None:  # else the state is the checkpoint restored
            self._checkpoint(local, wait=True)
        self.stopped_by = signal_name
        by = self.stop.received or f"{signal_name} (to another process)"
        self.progress.note(
            f"stopped by {by} after step {step}: saved {self.last_checkpoint}; "
            "run the same command again to resume"
        )

    def run(self, on_ready: Callable[[], None] = lambda: None) -> LoopOutcome:
        """Train to the last step; ``on_ready`` is called once, just before the first step is dispatched."""
        config, trainer = self.parts.config, self.parts.config.trainer
        batches, program, profiler = self.parts.batches, self.parts.program, trainer.profiler
        trace = ProfileTrace(self.parts.directory.profile)
        start = int(jax.device_get(self.state.step))
        self.stop.begin(start, abandoned=self.abandoned)
        self.progress.update_total(trainer.num_train_steps, start)
        if start == 0:
            self.first_eval = self._evaluate(0)
            self.parts.clock.lap("first evaluation")
        on_ready()
        self.rate.resume()
        with jax.set_mesh(program.plan.mesh):
            for step, local in batches.iterate(start, trainer.num_train_steps):
                if step == start and start > 0 and (changed := self.data_note(batch_hash(local))):
                    self.progress.note(changed)  # the first batch is not the one the checkpoint recorded
                stop, due = self._decide(step, start)
                if stop is not None:
                    self._stop_at(step, start, stop, local)
                    return self._outcome()
                if due:
                    self._checkpoint(local)
                if profiler is not None and step == profiler.start_step:
                    trace.start()
                rows = batches.schedule.size(step)
                if trainer.log_batch_hashes:
                    self._log_batch_hash(step, local)
                batch = program.device_batch(local, rows)
                self.state, metrics = program.step(self.state, batch, rows, config.model.z_loss_at(step))
                self._flush()
                self.pending = (step, metrics, rows)
                if profiler is not None and step == profiler.start_step + profiler.num_steps - 1:
                    jax.block_until_ready(self.state)
                    trace.stop()
                done = step + 1
                if done == trainer.num_train_steps:
                    break
                if self.parts.evaluation.due(done):
                    self._flush()
                    self.last_eval = self._evaluate(done, due_only=True)
                if self.parts.exports.due(done):
                    self._export(done)
            # Under the mesh like every other save: the mesh is part of a trace's context, so a save outside
            # it traced and compiled the checkpoint's fingerprints again (0.27 s for the tests' small model).
            self._flush(force=True)
            self._final_checkpoint()
        last = int(jax.device_get(self.state.step))
        self.last_eval = self._evaluate(last)
        if self.parts.exports.due(last):
            self._export(last)
        self.first_eval = self.first_eval or self.last_eval
        return self._outcome()

    def _outcome(self) -> LoopOutcome:
        return LoopOutcome(
            self.state,
            self.stopped_by,
            self.last_checkpoint,
            self.evaluations,
            self.rate.total_tokens,
            self.rate.overall(),
        )


@dataclasses.dataclass
class Speed:
    tokens_per_second: float
    flops_per_second: float
    mfu: float | None


class Throughput:
    """Tokens per second (and model FLOP/s, MFU) since the last report, evaluation time excluded."""

    def __init__(self, config: RunConfig, device_count: int):
        self.flops_per_token = flops_per_token(config.model, config.data.seq_len)
        self.seq_len = config.data.seq_len
        peak = peak_flops_per_device()
        self.peak = None if peak is None else peak * device_count
        self.total_tokens = self._tokens = 0
        self._since, self._banked, self._total_seconds = time.perf_counter(), 0.0, 0.0

    def add(self, rows: int) -> None:
        self._tokens += rows * self.seq_len
        self.total_tokens += rows * self.seq_len

    def pause(self) -> None:
        """Stop the clock (an evaluation is not training time) until ``resume``."""
        self._banked += time.perf_counter() - self._since

    def resume(self) -> None:
        self._since = time.perf_counter()

    def interval(self) -> Speed:
        now = time.perf_counter()
        seconds = max(self._banked + now - self._since, 1e-9)
        self._total_seconds += seconds
        tokens_per_second = self._tokens / seconds
        self._tokens, self._since, self._banked = 0, now, 0.0
        flops = tokens_per_second * self.flops_per_token
        return Speed(tokens_per_second, flops, None if self.peak is None else flops / self.peak)

    def overall(self) -> float:
        return self.total_tokens / max(self._total_seconds, 1e-9)
