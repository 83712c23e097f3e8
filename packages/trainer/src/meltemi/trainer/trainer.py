"""A run, as its recipe: compile the train step, restore or initialize the state, loop (step, log,
evaluate, checkpoint: ``run.loop``), summarize. Each other concern is its stage's: the batches and the step
(``step.program``), evaluation (``step.evaluation``), the run directory's session files (``run.run_files``),
the summary (``run.summary``), the chat replies (``generate.replies``).

From the command line to the train step: ``apps/pretrain.py`` calls ``cli.main``, which runs
``Trainer.run``, whose ``StepLoop.run`` calls ``TrainProgram.step``, the jitted ``step.train_step``.

Typical use, from a YAML preset and command-line overrides::

    config = load_config("configs/tiny.yaml", ["--trainer.num_train_steps", "60"])
    summary = Trainer(config, "runs/tiny").run()
    print(summary.last_eval["eval/loss"], summary.plot_path)
"""

from __future__ import annotations

import os
import time

import jax

from meltemi.datastore.storage import Location, retried_requests
from meltemi.trainer.checkpoint.checkpointer import STEP_PREFIX, Checkpointer, find_checkpoints
from meltemi.trainer.checkpoint.resume import Start, starting_state
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_data import RunData, open_data
from meltemi.trainer.generate.replies import chat_replies, reply_prompt
from meltemi.trainer.harness.in_loop import downstream_eval, plot_downstream
from meltemi.trainer.phase.initialize import initialize_from_base, resolve_run
from meltemi.trainer.run.hf_exports import HfExports
from meltemi.trainer.run.loop import LoopOutcome, LoopParts, StepLoop
from meltemi.trainer.run.plots import plot_loss, plot_norms
from meltemi.trainer.run.progress import TrainingProgress
from meltemi.trainer.run.run_files import SessionFiles, open_session_files
from meltemi.trainer.run.signals import StopSignals
from meltemi.trainer.run.startup import StartupClock
from meltemi.trainer.run.summary import RunSummary, evaluations
from meltemi.trainer.run.trackers import Trackers, read_metrics
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step import compile_cache
from meltemi.trainer.step.cache_mirror import RunMirror, open_mirror
from meltemi.trainer.step.distributed import wait_for_every_process
from meltemi.trainer.step.evaluation import Evaluation
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import CompileReport, TrainProgram
from meltemi.trainer.step.train_step import TrainState

__all__ = ["RunSummary", "Trainer"]

ABANDON_GRACE_S = 5.0  # after a second Ctrl-C, the seconds a step that does not return may take


class Trainer:
    """One run of ``config`` in ``run_dir``. Construction checks the mesh and the data (errors name the
    field, before any compile) and turns on the compilation cache the config asks for; ``run()`` trains and
    returns a ``RunSummary``. ``clock`` (an entry point's, counting from its imports) times the start."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: str | os.PathLike | Location | RunDirectory,
        *,
        devices: list[jax.Device] | None = None,
        progress: bool = True,
        clock: StartupClock | None = None,
    ):
        self.directory = RunDirectory.of(run_dir)  # a local path or a bucket URL, never a Path made of one
        self.run_dir = self.directory.location
        self.directory.check()  # a bad bucket or endpoint: one line before its checkpoints are listed
        self.config = config = resolve_run(config, self.run_dir)  # the base checked; stores: concrete paths
        self.show_progress, self.is_primary = progress, jax.process_index() == 0
        self.clock = clock or StartupClock(started=time.perf_counter())
        self.compile_cache = compile_cache.enable_for(config.trainer)
        mirror = open_mirror(config.trainer.compile_cache_mirror, self.run_dir, self.compile_cache.directory)
        self.cache_mirror = RunMirror(mirror, primary=self.is_primary)
        self.plan = MeshPlan.of(config, devices)
        self.data: RunData = open_data(config, jax.process_index(), jax.process_count())
        self.clock.lap("stores")
        self.program = TrainProgram(config, self.plan)
        # eval.tasks: lm-evaluation-harness tasks, built now (an unknown task stops the run before it starts)
        self.evaluation = Evaluation(
            config, self.plan, self.program, self.data, downstream_eval(config, self.plan)
        )
        self.exports = HfExports.of(config, self.directory, self.data)  # trainer.export_every
        self.compile_report: CompileReport | None = None

    def initial_state(self) -> TrainState:
        """The step-0 state, created directly in its sharded layout."""
        return self.program.initial_state()

    def compile(self, global_batch_size: int | None = None) -> jax.stages.Compiled:
        """Compile the train step for a batch size (default: the first) ahead of time; keep its report."""
        compiled, self.compile_report = self.program.compile(global_batch_size)
        return compiled

    def run(self, state: TrainState | None = None) -> RunSummary:
        """Train to ``trainer.num_train_steps`` from ``state``, or else from where this run directory's
        checkpoints left off (``trainer.initialize_from``, or a fresh state, when it has none): compile,
        restore or initialize, loop (step, log, evaluate, checkpoint), summarize.

        SIGTERM and Ctrl-C save a checkpoint at the next step boundary and return (``stopped_by`` says which).
        A config the run's checkpoint refuses (a ``ConfigError``) leaves the run directory as it was.
        """
        config, last_step = self.config, self.config.trainer.num_train_steps
        retried_before = retried_requests()
        self.directory.check()
        progress = TrainingProgress(last_step, 0, enabled=self.show_progress and self.is_primary)
        files = SessionFiles(Trackers([]), None)
        try:
            signals = StopSignals(say=progress.note, grace_s=ABANDON_GRACE_S)
            with progress, signals as stop, compile_cache.CacheCounter() as cached:
                self.cache_mirror.pull(progress.note)  # before anything compiles, on every host
                if state is not None or not self._finished_before():
                    self._compile_step(progress)  # from shapes, before the state: one too big is never made
                start = self._start(state, progress)
                start_step = int(jax.device_get(start.state.step))
                if start_step >= last_step:
                    return self._already_trained(start, progress)
                if self.compile_report is None:  # the finished checkpoint was damaged: the run goes on
                    self._compile_step(progress)
                files = open_session_files(self.directory, config, start_step,
                                           resumed=start.resumed_from is not None, primary=self.is_primary,
                                           note=progress.note)  # fmt: skip
                self.clock.lap("run directory")
                checkpointer = self._checkpointer(start, files)
                self._announce(start, progress)
                replies, prompt = [], reply_prompt(config, self.data)
                if start_step == 0 and start.initialized_from is not None:  # before its buffers are donated
                    replies += chat_replies("before", start.state.model, prompt, config, self.data, self.plan)
                parts = LoopParts(config, self.directory, self.is_primary, self.data.train, self.program,
                                  self.evaluation, self.exports, self.clock, files.trackers, progress,
                                  checkpointer, stop)  # fmt: skip
                loop = StepLoop(parts, start.state, start.resumed_from, start.data_note)
                ended = loop.run(on_ready=lambda: progress.note(self.clock.line(self.cache_mirror.line(
                    self.compile_cache, cached))))  # fmt: skip
                if ended.stopped_by is None:  # the trained model: the average of the weights when kept
                    replies += chat_replies(
                        "after", ended.state.trained, prompt, config, self.data, self.plan
                    )
                self.cache_mirror.push(progress.note)  # the eval and sampling programs too
        finally:
            files.close()
        return self._summary(
            ended.state,
            self._plot(ended),
            tokens_per_second=ended.tokens_per_second,
            last_checkpoint=ended.last_checkpoint,
            stopped_by=ended.stopped_by,
            checkpoint_seconds_blocked=checkpointer.seconds_blocked,
            start_step=start_step,
            resumed_from=start.resumed_from,
            session_steps=int(jax.device_get(ended.state.step)) - start_step,
            session_tokens=ended.session_tokens,
            replies=tuple(replies),
            storage_retries=retried_requests() - retried_before,
            reply_prompt=prompt if replies else None,
        )

    def _start(self, state: TrainState | None, progress: TrainingProgress) -> Start:
        """Where this session starts: ``state`` when given, else the run's newest checkpoint, its base, or
        afresh (``checkpoint.resume``)."""
        initialize = initialize_from_base if self.config.trainer.initialize_from is not None else None
        start = (
            Start(state, None, None) if state is not None else starting_state(self, progress.note, initialize)
        )
        self.clock.lap("checkpoint restored" if start.resumed_from is not None else "state created")
        return start

    def _announce(self, start: Start, progress: TrainingProgress) -> None:
        """Say where the session started and what its data holds (packing, and a source smaller than a
        batch or read for many epochs)."""
        if start.resumed_from is not None:
            progress.note(start.resume_line())
        elif start.initialized_from is not None:
            progress.note(f"initialized from {start.initialized_from}")
            if start.added_tokens:
                progress.note(
                    f"the vocabulary grew by {len(start.added_tokens)} rows for "
                    f"{', '.join(start.added_tokens)}: each starts as the mean of the base's rows"
                )
        for name, packing in self.data.packing.items():
            progress.note(f"{name}: {packing}")
        for note in self.data.notes:
            progress.note(note)

    def _checkpointer(self, start: Start, files: SessionFiles) -> Checkpointer:
        """The checkpointer of this session: what each checkpoint records besides the state."""
        return Checkpointer(
            self.run_dir,
            self.config.trainer,
            self.config.model_dump(mode="json"),
            initialized_from=start.initialized_from,
            tokenizer=files.tokenizer,
            end_of_text=self.data.end_of_text,
            chat=self.data.chat,
            added_tokens=start.added_tokens,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
        )

    def _plot(self, ended: LoopOutcome) -> tuple[str | None, list[tuple[int, dict[str, float]]]]:
        """The loss plot (and the tasks' and norms' beside it, the first process's; None with
        ``trainer.plots`` off) and the run's held-out evaluations through the step the loop reached, read
        back from the metrics."""
        records = read_metrics(self.run_dir / RunDirectory.METRICS)
        plot = self._plot_path()
        if self.is_primary and plot is not None:
            plot = plot_loss(records, self.run_files, RunDirectory.LOSS_PLOT)
            if self.evaluation.tasks is not None:  # eval.tasks: their metrics by step, beside it
                plot_downstream(records, self.run_files)
            plot_norms(records, self.run_files, RunDirectory.NORMS_PLOT)  # trainer.watch's, by layer group
        steps = int(jax.device_get(ended.state.step))
        return plot, evaluations(
            records, steps
        ) or ended.evaluations  # another process may not see the record

    def _plot_path(self) -> str | None:
        """Where the loss plot goes, or None when ``trainer.plots`` is off."""
        return self.directory.where(RunDirectory.LOSS_PLOT) if self.config.trainer.plots else None

    @property
    def run_files(self):
        """The run directory's small objects: config, metrics, plots."""
        return self.directory.files

    def _summary(
        self, state: TrainState, plotted: tuple[str | None, list[tuple[int, dict[str, float]]]], **session
    ) -> RunSummary:
        """A ``RunSummary`` of the run at ``state`` with its plot and held-out evaluations; ``session``
        holds what this invocation did."""
        plot_path, evals = plotted
        steps = int(jax.device_get(state.step))
        return RunSummary(
            run_dir=self.run_dir,
            sources=tuple(self.data.source_names),
            chat_sources=self.data.chat_sources,
            steps=steps,
            tokens=self.data.train.schedule.first_row(steps) * self.config.data.seq_len,
            skipped_steps=int(jax.device_get(state.skipped_steps)),
            first_eval=evals[0][1] if evals else {},
            last_eval=evals[-1][1] if evals else {},
            metrics_path=self.directory.where(RunDirectory.METRICS),
            plot_path=plot_path,
            first_eval_step=evals[0][0] if evals else None,
            last_eval_step=evals[-1][0] if evals else None,
            data_notes=self.data.notes,
            **session,
        )

    def _already_trained(self, start: Start, progress: TrainingProgress) -> RunSummary:
        """The summary of a finished run found in the run directory, from its checkpoint and its metrics; the
        directory is left as it was."""
        step, last = int(jax.device_get(start.state.step)), self.config.trainer.num_train_steps
        progress.note(f"already trained to step {step} (trainer.num_train_steps {last}): nothing to train")
        records = evaluations(read_metrics(self.run_dir / RunDirectory.METRICS), step)
        return self._summary(
            start.state,
            (self._plot_path(), records),
            tokens_per_second=0.0,
            last_checkpoint=start.resumed_from,
            stopped_by=None,
            checkpoint_seconds_blocked=0.0,
            start_step=step,
            resumed_from=start.resumed_from,
            session_steps=0,
            session_tokens=0,
            already_trained=True,
        )

    def _finished_before(self) -> bool:
        """Whether the run's newest checkpoint, by its name alone, is at its last step: a rerun of a finished
        run, which reports it without compiling."""
        newest = find_checkpoints(self.run_dir)[:1]
        return bool(newest) and int(newest[0].location.name.removeprefix(STEP_PREFIX)) >= (
            self.config.trainer.num_train_steps
        )

    def _compile_step(self, progress: TrainingProgress) -> None:
        """Compile the train step from shapes (every process), say what it costs, and check it fits."""
        self.compile()
        wait_for_every_process("train step compiled")
        self.cache_mirror.push(progress.note)
        progress.note(self.compile_report.line("the train step", self.plan.shape))
        self.program.check_host_memory(self.compile_report)
        self.clock.lap("train step compiled")
