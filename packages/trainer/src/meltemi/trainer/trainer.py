"""The training loop: check everything, compile the step once, then step, log, evaluate and plot.

Typical use, from a YAML preset and command-line overrides::

    config = load_config("configs/tiny.yaml", ["--trainer.num_train_steps", "60"])
    summary = Trainer(config, "runs/tiny").run()
    print(summary.last_eval["eval/loss"], summary.plot_path)
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
from meltemi.datastore import BatchLoader
from meltemi.datastore.errors import DatastoreError, StorageError
from meltemi.datastore.storage import Location, retried_requests
from meltemi.trainer import adapters
from meltemi.trainer.checkpoint.checkpointer import STEP_PREFIX, Checkpointer, find_checkpoints
from meltemi.trainer.checkpoint.resume import Start, starting_state
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.data.run_data import RunData, open_data, reply_tokens
from meltemi.trainer.data.run_tokenizer import TokenizerRecord, copy_into_run, file_sha256, tokenizer_at
from meltemi.trainer.errors import HostMemoryError, TrainerError
from meltemi.trainer.harness.in_loop import downstream_eval, plot_downstream
from meltemi.trainer.phase.initialize import initialize_from_base, resolve_run
from meltemi.trainer.run.hf_exports import HfExports
from meltemi.trainer.run.loop import StepLoop
from meltemi.trainer.run.plots import plot_loss, plot_norms
from meltemi.trainer.run.progress import TrainingProgress
from meltemi.trainer.run.signals import StopSignals, exit_status
from meltemi.trainer.run.startup import StartupClock
from meltemi.trainer.run.trackers import Trackers, read_metrics, rewind_record
from meltemi.trainer.run_directory import RunDirectory, RunLock
from meltemi.trainer.step import compile_cache
from meltemi.trainer.step.cache_mirror import open_mirror
from meltemi.trainer.step.distributed import wait_for_every_process
from meltemi.trainer.step.eval_step import BatchSums, make_eval_step, summarize
from meltemi.trainer.step.host_memory import HostMemory
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.step.program import CompileReport, TrainProgram
from meltemi.trainer.step.train_step import TrainState

REPLY_LINES = 8  # lines of each reply the summary shows
PROMPT_SHOWN = 300  # characters of the message replied to that the summary shows
ABANDON_GRACE_S = 5.0  # after a second Ctrl-C, the seconds a step that does not return may take


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """How a run went, as a whole and in this session (this call of ``run``).

    The run: ``steps`` (the step its state reached), ``tokens`` (its batches' tokens from step 0, by this
    config's batch schedule and ``data.seq_len``), ``skipped_steps``, and its first and latest held-out
    evaluations (``first_eval`` at ``first_eval_step``, step 0 for a run started afresh, read back from
    ``metrics.jsonl`` when resumed; ``last_eval`` at ``last_eval_step``; empty and None when none was made).
    This session: ``start_step`` (where it began; ``resumed_from`` the checkpoint, when resumed),
    ``session_steps``, ``session_tokens`` and ``tokens_per_second`` (evaluations not counted).
    ``stopped_by``: the signal (``"SIGTERM"``, ``"SIGINT"``) that stopped it early after a checkpoint (on
    every process of the run, whichever one it reached); ``exit_status`` the process's status for it.
    ``already_trained``: the run directory held the finished run, so nothing was compiled or trained.
    ``storage_retries``: this session's requests to buckets that met a transient error and were retried.
    ``data_notes``: what the run should know of its data (a source smaller than a batch, or read for many
    epochs: ``RunData.notes``). ``reply_prompt``: the user's message ``replies`` answer."""

    run_dir: Location
    steps: int
    tokens: int
    skipped_steps: int
    first_eval: dict[str, float]
    last_eval: dict[str, float]
    tokens_per_second: float
    metrics_path: str
    plot_path: str
    last_checkpoint: Location | None
    stopped_by: str | None
    checkpoint_seconds_blocked: float
    start_step: int
    resumed_from: Location | None
    session_steps: int
    session_tokens: int
    first_eval_step: int | None
    last_eval_step: int | None
    already_trained: bool = False
    replies: tuple[tuple[str, str], ...] = ()
    sources: tuple[str, ...] = ()
    chat_sources: tuple[str, ...] = ()
    storage_retries: int = 0
    data_notes: tuple[str, ...] = ()
    reply_prompt: str | None = None

    def reply_lines(self, prompt: str | None = None) -> list[str]:
        """A chat run's replies to ``prompt`` (default ``reply_prompt``; before fine-tuning, when this session
        began from the base, and after), one labelled line each; none for a run without them."""
        if not self.replies:
            return []
        prompt = self.reply_prompt if prompt is None else prompt
        shown = prompt if len(prompt) <= PROMPT_SHOWN else prompt[:PROMPT_SHOWN] + "..."
        lines = [f"reply (greedy) to {shown!r}:"]
        width = max(len(label) for label, _ in self.replies)
        for label, text in self.replies:
            shown = text.strip().splitlines()[:REPLY_LINES] or ["(no reply: it ended the turn at once)"]
            if len(text.strip().splitlines()) > REPLY_LINES:
                shown[-1] += " ..."
            lines.append(f"  {label + ':':<{width + 1}} {shown[0]}")
            lines += [" " * (width + 4) + line for line in shown[1:]]
        return lines

    @property
    def exit_status(self) -> int:
        """What the process should exit with: 0 when the run reached its last step (or had already), 130
        after a SIGINT stopped it, 143 after a SIGTERM (128 plus the signal's number, as shells report it),
        so a scheduler can tell a stopped run from a finished one."""
        return exit_status(self.stopped_by)

    def session_line(self) -> str:
        """What this session did: ``trained 60 steps (245,760 tokens, 1,257 tokens/s)`` from step 0, else
        ``resumed at step 40: this session trained 20 steps (81,920 tokens, 1,257 tokens/s)``."""
        trained = (
            f"trained {self.session_steps} steps ({self.session_tokens:,} tokens, "
            f"{self.tokens_per_second:,.0f} tokens/s)"
        )
        if self.start_step == 0:
            return trained
        began = "resumed" if self.resumed_from is not None else "started"
        return f"{began} at step {self.start_step}: this session {trained}"

    def held_out_line(self) -> str:
        """``held-out loss: 9.081 at step 0 -> 5.949 at step 60`` (the run's first and latest evaluation; a
        chat run's is the loss of the assistant's tokens), then each source's when there are several (a chat
        source's being its assistant tokens': ``(chat, assistant tokens: 7.186 -> 4.791; text: 4.167 ->
        4.102)``), and the latest of the average of the weights when the run keeps one (``; EMA weights:
        5.871``, ``eval/ema/loss``), or an empty string when the run has none."""
        first, last = self.first_eval.get("eval/loss"), self.last_eval.get("eval/loss")
        if first is None or last is None:
            return ""
        every_chat = bool(self.chat_sources) and set(self.sources) <= set(self.chat_sources)
        what = "held-out assistant loss" if every_chat else "held-out loss"
        line = (
            f"{what}: {first:.3f} at step {self.first_eval_step} -> {last:.3f} at step {self.last_eval_step}"
        )
        averaged = self.last_eval.get("eval/ema/loss")
        ema = "" if averaged is None else f"; EMA weights: {averaged:.3f}"
        if len(self.sources) < 2:
            return line + ema
        each = []
        for name in self.sources:
            began, now = self.first_eval.get(f"eval/{name}/loss"), self.last_eval.get(f"eval/{name}/loss")
            if began is not None and now is not None:
                label = f"{name}, assistant tokens" if name in self.chat_sources and not every_chat else name
                each.append(f"{label}: {began:.3f} -> {now:.3f}")
        return (f"{line} ({'; '.join(each)})" if each else line) + ema


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
        config = resolve_run(
            config, self.run_dir
        )  # the base checked; stores, corpora, stdlib: concrete paths
        self.config, self.show_progress = config, progress
        self.run_files = self.directory.files  # its small objects: config, metrics, plot
        self.clock = clock or StartupClock(started=time.perf_counter())
        self.compile_cache = compile_cache.enable_for(config.trainer)
        self.cache_mirror = open_mirror(
            config.trainer.compile_cache_mirror, self.run_dir, self.compile_cache.directory
        )
        self.plan = MeshPlan.of(config, devices)
        self.data: RunData = open_data(config, jax.process_index(), jax.process_count())
        self.clock.lap("stores")
        self.is_primary = jax.process_index() == 0
        self.program = TrainProgram(config, self.plan)
        self._eval_fn = None
        # eval.tasks: lm-evaluation-harness tasks, built now (an unknown task stops the run before it starts)
        self.downstream = downstream_eval(config, self.plan)
        self.exports = HfExports.of(config, self.directory, self.data)  # trainer.export_every
        self._eval_compiled: set[int] = set()  # batch sizes
        self._batch_layouts: dict[int, dict[str, tuple]] = {}
        self.compile_report: CompileReport | None = None
        self.run_lock: RunLock | None = None  # the run directory, held while this run writes it

    def initial_state(self) -> TrainState:
        """The step-0 state, created directly in its sharded layout."""
        return self.program.initial_state()

    def compile(self, global_batch_size: int | None = None) -> jax.stages.Compiled:
        """Compile the train step for a batch size (default: the first) ahead of time; keep its report."""
        compiled, self.compile_report = self.program.compile(global_batch_size)
        return compiled

    def _eval_program(self):
        if self._eval_fn is None:
            step = make_eval_step(self.config)
            compute = self.plan.compute_mapping

            def in_mapping(model, batch, byte_lengths):
                with hax.axis_mapping(compute):
                    return step(model, batch, byte_lengths)

            self._eval_fn = jax.jit(in_mapping, out_shardings=self.plan.replicated())
        return self._eval_fn

    # ---- data to devices ---------------------------------------------------------------------------------

    @property
    def mesh(self) -> jax.sharding.Mesh:
        return self.plan.mesh

    @property
    def train_batches(self) -> BatchLoader:
        return self.data.train

    def train_step(self, state: TrainState, local: dict[str, np.ndarray], step: int):
        """Step ``step``, compiled for its batch size and z-loss weight, on this process's rows ``local``."""
        rows = self.train_batches.schedule.size(step)
        weight = self.config.model.z_loss_at(step)
        return self.program.step(state, self.global_batch(local, rows), rows, weight)

    def global_batch(self, local: dict[str, np.ndarray], global_rows: int) -> adapters.NamedBatch:
        """This process's rows, assembled with the other processes' into one global named batch."""
        host = adapters.batch_host_arrays(local)
        if global_rows not in self._batch_layouts:  # traced once per batch size, not once per step
            shapes = self.program.abstract_batch(global_rows)
            shardings = self.plan.compute_shardings(shapes)
            self._batch_layouts[global_rows] = {
                name: (getattr(shardings, name).array, getattr(shapes, name).array.shape) for name in host
            }
        arrays = {}
        for name, (sharding, shape) in self._batch_layouts[global_rows].items():
            arrays[name] = jax.make_array_from_process_local_data(sharding, host[name], shape)
        return adapters.named_batch(arrays)

    # ---- the loop ----------------------------------------------------------------------------------------

    def evaluate(self, state: TrainState, at: int | None = None) -> dict[str, float]:
        """Held-out loss (and bits per byte with a tokenizer) of every source, over ``eval_steps`` batches;
        with ``optimizer.ema``, past its start, the same of the average of the weights as ``eval/ema/...``
        (Levanter's names: ``eval/loss`` is the weights' as trained, ``eval/ema/loss`` the average's).
        The eval sets are evaluated beside the sources (``summarize`` names their metrics), and ``eval.tasks``
        after them; ``at`` a step of the run, only what is due then (``evaluation_due``), else everything."""
        held_out, tasks = self._evaluations_due(at)
        program = self._eval_program()
        table = self.data.token_bytes if self.data.token_bytes is not None else np.zeros(1, np.int32)
        lengths = jnp.asarray(np.pad(table, (0, max(0, self.config.model.vocab_size - len(table)))))
        per_source = {}
        with jax.set_mesh(self.plan.mesh):
            for name, loader in self.data.held_out.items() if held_out else ():
                sums = BatchSums(0.0, 0.0, 0.0)
                for step in range(self.data.eval_steps[name]):
                    rows = loader.schedule.size(step)
                    batch = self.global_batch(loader.batch(step), rows)
                    if jax.process_count() > 1 and rows not in self._eval_compiled:
                        # every process compiles it before any runs it (see the wait)
                        program.lower(state.model, batch, lengths).compile()
                        wait_for_every_process("eval step compiled")
                        self._eval_compiled.add(rows)
                    part = jax.device_get(program(state.model, batch, lengths))
                    sums = BatchSums(
                        sums.loss + part.loss, sums.tokens + part.tokens, sums.bytes + part.bytes
                    )
                per_source[name] = sums
        with_bytes = self.data.token_bytes is not None
        metrics = summarize(per_source, with_bytes, self.data.eval_set_tags) if held_out else {}
        if self.downstream is not None and tasks:  # eval.tasks: eval/<task>/<metric> beside the held-out loss
            metrics.update(self.downstream.run(state.model))
        if self._average_differs(state):  # the same of the average of the weights, as eval/ema/...
            averaged = self.evaluate(dataclasses.replace(state, model=state.ema, ema=None), at)
            metrics.update({f"eval/ema/{key.removeprefix('eval/')}": v for key, v in averaged.items()})
        return metrics

    def evaluation_due(self, step: int) -> bool:
        """Whether the run evaluates anything after ``step`` steps, besides its first and last evaluation:
        the held-out sets every ``trainer.eval_every`` steps, ``eval.tasks`` every ``eval.every``."""
        return any(self._evaluations_due(step))

    def _evaluations_due(self, step: int | None) -> tuple[bool, bool]:
        """Whether the held-out sets and the tasks are evaluated at ``step`` (None: both, as at the first and
        last evaluation)."""
        if step is None:
            return True, True
        held_every = self.config.trainer.eval_every
        task_every = held_every if self.config.eval.every is None else self.config.eval.every
        held_out = held_every > 0 and step % held_every == 0
        return held_out, self.downstream is not None and task_every > 0 and step % task_every == 0

    def _average_differs(self, state: TrainState) -> bool:
        """Whether ``state`` keeps an average of its weights (``optimizer.ema``) that has moved apart from
        them: past its ``start_step`` (until then it is a copy of the weights)."""
        ema = self.config.optimizer.ema
        return state.ema is not None and ema is not None and int(jax.device_get(state.step)) > ema.start_step

    def _prepare_run_dir(
        self, start_step: int, resumed: bool, note: Callable[[str], None]
    ) -> tuple[Trackers, TokenizerRecord | None]:
        """Once the config is accepted (the run's checkpoint restored, or none found): write it, rewind the
        step records to what this session logs first, and open the trackers (the first process's; the others
        log nothing). Nothing in the run directory changes before this.

        A resumed session keeps the rows of the step it resumes from (it logs from the next one on); one that
        starts at step 0 evaluates step 0 again, so it keeps none. Batch hashes are logged before each step,
        so the step resumed from is hashed again. The tokenizer is copied into the run (a resumed run's copy
        must be the config's tokenizer), and its record returned for the checkpoints."""
        tokenizer = self.config.data.tokenizer
        if not self.is_primary:
            record = (
                None if tokenizer is None else TokenizerRecord(RunDirectory.TOKENIZER, file_sha256(tokenizer))
            )
            return Trackers([]), record
        first_logged = start_step + 1 if start_step else 0
        try:
            self.run_lock = self.directory.hold()  # another run training here: refused, nothing written
            record = None if tokenizer is None else copy_into_run(tokenizer, self.run_files, resumed=resumed)
            self.run_files.write_text(RunDirectory.CONFIG, dump_config(self.config))
            for name, first in ((RunDirectory.METRICS, first_logged), (RunDirectory.BATCHES, start_step)):
                rewound = rewind_record(self.run_files, name, first)
                if rewound is not None:
                    note(rewound.describe(self.run_files.where(name), first))
            trackers = Trackers.for_run(
                self.config.trainer.trackers,
                self.run_files,
                self.config.model_dump(mode="json"),
                first_logged,
            )
            return trackers, record
        except OSError as e:
            raise TrainerError(f"run directory {self.run_dir}: cannot write there ({e.strerror})") from None
        except StorageError as e:
            raise TrainerError(f"run directory {self.run_dir}: cannot write there ({e})") from None

    def run(self, state: TrainState | None = None) -> RunSummary:
        """Train to ``trainer.num_train_steps`` from ``state``, or else from where this run directory's
        checkpoints left off (``trainer.initialize_from``, or a fresh state, when it has none).

        SIGTERM and Ctrl-C save a checkpoint at the next step boundary and return (``stopped_by`` says which).
        A config the run's checkpoint refuses (a ``ConfigError``) leaves the run directory as it was.
        """
        config, trainer = self.config, self.config.trainer
        retried_before = retried_requests()
        self.directory.check()
        trackers = Trackers([])
        progress = TrainingProgress(
            trainer.num_train_steps, 0, enabled=self.show_progress and self.is_primary
        )
        try:
            signals = StopSignals(say=progress.note, grace_s=ABANDON_GRACE_S)
            with progress, signals as stop, compile_cache.CacheCounter() as cached:
                self._sync_cache_mirror("pull", progress.note)  # before anything compiles, on every host
                if state is not None or not self._finished_before():
                    self._compile_step(progress)  # from shapes, before the state: one too big is never made
                initialize = initialize_from_base if config.trainer.initialize_from is not None else None
                start = (
                    Start(state, None, None)
                    if state is not None
                    else starting_state(self, progress.note, initialize)
                )
                self.clock.lap("checkpoint restored" if start.resumed_from is not None else "state created")
                start_step = int(jax.device_get(start.state.step))
                if start_step >= trainer.num_train_steps:
                    return self._already_trained(start, progress)
                if self.compile_report is None:  # the finished checkpoint was damaged: the run goes on
                    self._compile_step(progress)
                trackers, tokenizer = self._prepare_run_dir(
                    start_step, start.resumed_from is not None, progress.note
                )
                self.clock.lap("run directory")
                checkpointer = Checkpointer(
                    self.run_dir,
                    trainer,
                    config.model_dump(mode="json"),
                    initialized_from=start.initialized_from,
                    tokenizer=tokenizer,
                    end_of_text=self.data.end_of_text,
                    chat=self.data.chat,
                    added_tokens=start.added_tokens,
                    process_index=jax.process_index(),
                    process_count=jax.process_count(),
                )
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
                for note in self.data.notes:  # a source smaller than a batch, or read for many epochs
                    progress.note(note)
                replies = []
                if start_step == 0 and start.initialized_from is not None:
                    replies += self._chat_reply("before", start.state.model)  # before its buffers are donated
                loop = StepLoop(self, start.state, trackers, progress, checkpointer, stop, start.resumed_from,
                                start.data_note)  # fmt: skip
                stop.abandoned = loop.abandoned
                loop.run(on_ready=lambda: progress.note(self.clock.line(self._cache_note(cached))))
                if loop.stopped_by is None:  # the trained model: the average of the weights when kept
                    replies += self._chat_reply("after", loop.state.trained)
                self._sync_cache_mirror("push", progress.note)  # the eval and sampling programs too
        finally:
            trackers.close()
            if self.run_lock is not None:
                self.run_lock.release()
                self.run_lock = None
        records = read_metrics(self.run_dir / RunDirectory.METRICS)
        plot = (
            plot_loss(records, self.run_files, RunDirectory.LOSS_PLOT)
            if self.is_primary
            else self.directory.where(RunDirectory.LOSS_PLOT)
        )
        if self.downstream is not None and self.is_primary:  # eval.tasks: their metrics by step, beside it
            plot_downstream(records, self.run_files)
        if self.is_primary:  # trainer.watch's norms by layer group (none logged: no plot)
            plot_norms(records, self.run_files, RunDirectory.NORMS_PLOT)
        steps = int(jax.device_get(loop.state.step))
        evals = _evaluations(records, steps) or loop.evaluations  # another process may not see the record
        return self._summary(
            loop.state,
            evals,
            tokens_per_second=loop.rate.overall(),
            plot_path=plot,
            last_checkpoint=loop.last_checkpoint,
            stopped_by=loop.stopped_by,
            checkpoint_seconds_blocked=checkpointer.seconds_blocked,
            start_step=start_step,
            resumed_from=start.resumed_from,
            session_steps=steps - start_step,
            session_tokens=loop.rate.total_tokens,
            replies=tuple(replies),
            reply_prompt=self.reply_prompt() if replies else None,
            storage_retries=retried_requests() - retried_before,
        )

    def _summary(self, state: TrainState, evals: list[tuple[int, dict[str, float]]], **session) -> RunSummary:
        """A ``RunSummary`` of the run at ``state`` with its held-out ``evals``; ``session`` holds what this
        invocation did."""
        steps = int(jax.device_get(state.step))
        return RunSummary(
            run_dir=self.run_dir,
            sources=tuple(self.data.source_names),
            chat_sources=self.data.chat_sources,
            steps=steps,
            tokens=self._tokens_before(steps),
            skipped_steps=int(jax.device_get(state.skipped_steps)),
            first_eval=evals[0][1] if evals else {},
            last_eval=evals[-1][1] if evals else {},
            metrics_path=self.directory.where(RunDirectory.METRICS),
            first_eval_step=evals[0][0] if evals else None,
            last_eval_step=evals[-1][0] if evals else None,
            data_notes=self.data.notes,
            **session,
        )

    def _tokens_before(self, step: int) -> int:
        """The tokens of the batches of steps ``0 .. step - 1``, by this config's batch schedule."""
        return self.data.train.schedule.first_row(step) * self.config.data.seq_len

    def _already_trained(self, start: Start, progress: TrainingProgress) -> RunSummary:
        """The summary of a finished run found in the run directory, from its checkpoint and its metrics; the
        directory is left as it was."""
        step, last = int(jax.device_get(start.state.step)), self.config.trainer.num_train_steps
        progress.note(f"already trained to step {step} (trainer.num_train_steps {last}): nothing to train")
        return self._summary(
            start.state,
            _evaluations(read_metrics(self.run_dir / RunDirectory.METRICS), step),
            tokens_per_second=0.0,
            plot_path=self.directory.where(RunDirectory.LOSS_PLOT),
            last_checkpoint=start.resumed_from,
            stopped_by=None,
            checkpoint_seconds_blocked=0.0,
            start_step=step,
            resumed_from=start.resumed_from,
            session_steps=0,
            session_tokens=0,
            already_trained=True,
        )

    def reply_prompt(self) -> str | None:
        """The user's message a chat run's summary replies to: with ``trainer.reply_to: held_out``, the first
        user message of the first held-out conversation (read back from its tokens by the run's template),
        else (or when no conversation is held out) ``trainer.sample_prompt``."""
        chat, tokenizer, ids = self.data.chat, self.config.data.tokenizer, self.data.held_out_prompt
        if self.config.trainer.reply_to == "held_out" and all(x is not None for x in (chat, tokenizer, ids)):
            from meltemi.trainer.data.user_message import first_user_message

            return first_user_message(ids, tokenizer_at(tokenizer), chat.template) or None
        return self.config.trainer.sample_prompt

    def _chat_reply(self, label: str, model) -> list[tuple[str, str]]:
        """``[(label, the model's greedy reply to reply_prompt())]`` in a chat run (the prompt as the user's
        message, rendered by the run's template), else nothing."""
        prompt, chat, tokenizer = self.reply_prompt(), self.data.chat, self.config.data.tokenizer
        if prompt is None or chat is None or tokenizer is None:
            return []
        from meltemi.trainer.generate.chat import conversation, reply
        from meltemi.trainer.generate.sampling import SamplingConfig

        completion = reply(
            model,
            tokenizer_at(tokenizer),
            chat.template,
            conversation(prompt),
            SamplingConfig(max_new_tokens=reply_tokens(self.config.model.max_seq_len)),
            self.data.end_of_text.stop_ids,
            plan=self.plan,
        )
        return [(label, completion.text or "")]

    def _cache_note(self, cached: compile_cache.CacheCounter) -> str:
        if not self.compile_cache.enabled:
            return self.compile_cache.describe()
        mirror = "" if self.cache_mirror is None else f", {self.cache_mirror.describe()}"
        return f"{self.compile_cache.describe()}{mirror}: {cached.describe()}"

    def _sync_cache_mirror(self, direction: str, note) -> None:
        """Fetch the bucket's compiled programs (``pull``, every process) or upload this host's (``push``,
        the first process); a storage failure only costs the mirror, said once: the run goes on."""
        mirror = self.cache_mirror
        if mirror is None or (direction == "push" and not self.is_primary):
            return
        try:
            mirror.pull() if direction == "pull" else mirror.push()
        except DatastoreError as e:
            note(f"compilation cache mirror off: {e}")
            self.cache_mirror = None

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
        self._sync_cache_mirror("push", progress.note)
        progress.note(self._compile_note())
        self._check_host_memory()
        self.clock.lap("train step compiled")

    def _check_host_memory(self) -> None:
        """On a CPU, refuse a train step larger than the memory this machine has (its devices share it): such
        a run would be killed by the system at its first step, or swap for hours, after making its state."""
        devices = [d for d in self.plan.mesh.devices.flat if d.process_index == jax.process_index()]
        memory = HostMemory.now() if devices[0].platform == "cpu" else None
        report = self.compile_report
        shortfall = (
            None if memory is None else memory.shortfall(report.peak_bytes, len(devices), "the train step")
        )
        if shortfall is None:
            return
        ways = ["lower trainer.global_batch_size or data.seq_len",
                "set trainer.microbatch_size (each step in several passes)"]  # fmt: skip
        if self.config.model.remat != "full":
            ways.append("set model.remat full")
        raise HostMemoryError(
            f"{shortfall}: it would be killed at its first step. To fit, {', '.join(ways)}, or train a "
            "smaller model (--config configs/tiny.yaml); --dry-run plans a config without training it"
        )

    def _compile_note(self) -> str:
        r = self.compile_report
        if r is None:
            return ""
        gib = 2**30
        return (
            f"compiled the train step in {r.seconds:.1f} s; per device: arguments "
            f"{r.argument_bytes / gib:.2f} GiB, temporaries {r.temp_bytes / gib:.2f} GiB; "
            f"mesh {self.plan.shape}"
        )


def _evaluations(records: list[dict], through: int) -> list[tuple[int, dict[str, float]]]:
    """The held-out evaluations of ``metrics.jsonl`` records up to step ``through``, with their steps."""
    return [
        (r["step"], {k: float(v) for k, v in r.items() if k.startswith("eval/")})
        for r in records
        if "eval/loss" in r and r["step"] <= through
    ]
