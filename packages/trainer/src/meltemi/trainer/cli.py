"""The trainer's command: ``python -m meltemi.trainer`` and ``apps/pretrain.py`` are this one ``main``, and
``apps/build_stores.py`` (the stores a run config's sources name by their raw inputs) is ``build_stores``.

    python -m meltemi.trainer --config configs/tiny.yaml --run-dir runs/tiny --trainer.num_train_steps 100
    python -m meltemi.trainer --config configs/marin_8b.yaml --dry-run --devices 8
    python -m meltemi.trainer --config configs/tiny.yaml --print-sharding

The command line is parsed once (:mod:`meltemi.trainer.command`), the config loaded once and its data made
concrete once (:mod:`meltemi.trainer.data.sources`); that one config flows to the dry run, the launcher or
the trainer. A user error ends with one line on stderr and exit status 1; a dry run whose plan does not fit
exits with 2. Progress and logs go to stderr, the summary to stdout.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from meltemi.trainer.command import Command, help_text, parse_command
from meltemi.trainer.errors import ConfigError, TrainerError
from meltemi.trainer.run.startup import StartupClock

if TYPE_CHECKING:
    import jax

    from meltemi.trainer.config import RunConfig
    from meltemi.trainer.data.store_builds import BuildOutcome
    from meltemi.trainer.plan.inference import InferencePlan
    from meltemi.trainer.run.summary import RunSummary
    from meltemi.trainer.run_directory import RunDirectory


def main(
    argv: Sequence[str] | None = None,
    *,
    prog: str = "python -m meltemi.trainer",
    default_config: str | os.PathLike | None = None,
    fine_tuning: bool = False,
) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``); its exit status. ``default_config`` is the
    preset used without ``--config`` (None: every field at its default); ``fine_tuning`` takes the
    fine-tuning command's flags (``--base``, ``--data``: ``apps/sft.py``)."""
    from meltemi.datastore import DatastoreError

    clock = StartupClock()
    try:
        command = parse_command(sys.argv[1:] if argv is None else argv, fine_tuning=fine_tuning)
        if command.help:
            shown = None if default_config is None else _as_typed(default_config)
            try:
                print(help_text(prog, shown, fine_tuning=fine_tuning, config=command.config))
            except BrokenPipeError:  # `--help | head`: the reader has what it wanted
                sys.stdout = open(os.devnull, "w")
            return 0
        if command.verify is not None:
            return verify(command.verify)
        if command.launch is not None:
            from meltemi.trainer.launch import check_address, slice_launch

            launch = slice_launch(command.launch)
            if command.launch.address is not None:
                check_address(command.launch.address)
        config_path = command.config or default_config
        from meltemi.trainer.config_io import load_config

        config = load_config(config_path, command.overrides)
        if fine_tuning:
            _check_base_named(config, command.config)
        if command.schedule_at is not None:
            return print_schedule(config, command.schedule_at)
        if command.dry_run:
            return plan(config, command)
        if command.print_sharding:
            return print_sharding(config)
        name = Path(config_path).stem if config_path is not None else "default"
        run_dir = command.run_dir or str(Path("runs") / name)  # a URL stays a URL: never a Path
        from meltemi.trainer.phase.initialize import resolve_run
        from meltemi.trainer.run_directory import RunDirectory

        run = RunDirectory.of(run_dir)
        run.check()  # before the data is built: that may take a while
        config = resolve_run(config, run.location, say=lambda line: print(line, file=sys.stderr))
        clock.lap("config")
        if command.launch is not None:
            from meltemi.trainer.launch import launch_on_ray

            processes, summary = launch_on_ray(config, run_dir, launch, command.launch.address)
            print(f"trained on {processes} processes")
            return report(summary, config, run_dir)
        return train(config, run, clock)
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # a second Ctrl-C, over 2 s after the first: stop now, no checkpoint
        print(str(stop) or "interrupted", file=sys.stderr)  # a store build's says what it kept
        return 130


def build_stores(argv: Sequence[str] | None = None, *, prog: str = "uv run apps/build_stores.py") -> int:
    """The store-building command (``apps/build_stores.py``): build the stores of the run config's sources
    that name their raw inputs (``build_from``) and are missing, or with ``--dry-run`` say what would be
    built; its exit status (1 when a source's store could not be built, each such source one line)."""
    from meltemi.datastore import DatastoreError

    try:
        command = parse_command(sys.argv[1:] if argv is None else argv, store_builds=True)
        if command.help:
            print(help_text(prog, None, config=command.config, store_builds=True))
            return 0
        from meltemi.trainer.config_io import load_config
        from meltemi.trainer.data import store_builds

        config = load_config(command.config, command.overrides)
        if not store_builds.store_builds(config):
            print(
                "nothing to build: no source of data.sources names the raw inputs of its store (build_from)"
            )
            return 0
        if command.dry_run:
            outcomes = store_builds.planned_lines(config)
            for outcome in outcomes:
                _show(outcome)
        else:
            outcomes = store_builds.build_missing_stores(_with_base(config), cluster=command.ray, done=_show)
        return 1 if any(outcome.failed for outcome in outcomes) else 0
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # the builds' parts so far are kept: the same command resumes them
        print(str(stop) or "interrupted", file=sys.stderr)
        return 130


def _show(outcome: BuildOutcome) -> None:
    """A source's line: how its build ended on stdout, or what stopped it on stderr."""
    if outcome.failed:
        print(f"error: {outcome.line}", file=sys.stderr)
    else:
        print(outcome.line)


def _with_base(config: RunConfig) -> RunConfig:
    """``config`` with the tokenizer and chat template its base gives it, as the run would have them
    (``trainer.initialize_from``; unchanged without a base)."""
    if config.trainer.initialize_from is None:
        return config
    from meltemi.trainer.data.run_tokenizer import tokenizer_file
    from meltemi.trainer.phase.initialize import resolve_base

    if config.data.tokenizer is not None:
        data = config.data.model_copy(update={"tokenizer": tokenizer_file(config.data.tokenizer)})
        config = config.model_copy(update={"data": data})
    return resolve_base(config)


def _check_base_named(config: RunConfig, given: str | None) -> None:
    """The fine-tuning command starts from a base: a ``ConfigError`` when ``config`` (from ``--config
    given``) names none, since it would train a model from random parameters under a fine-tuning's name."""
    if config.trainer.initialize_from is None:
        source = f"--config {given}" if given is not None else "the config"
        raise ConfigError(
            f"{source} names no base model to fine-tune (trainer.initialize_from): give one with --base "
            "RUN_OR_HF_DIR, or train a model from scratch with apps/pretrain.py"
        )


def exit_process(status: int) -> NoReturn:
    """End this process with ``status`` (a command's last call: ``exit_process(main())``).

    As Python shuts down it collects garbage once more, over every object still alive: after a run, a heap
    of traced and compiled JAX programs, 0.3-0.4 CPU-seconds at every exit (a 6-step run of a small model:
    4.95 CPU-seconds in all, 4.57 without that collection). ``gc.freeze`` first puts what is alive out of
    the collector's reach; the exit handlers still run (``jax.distributed``'s shutdown, a tracker's
    finish) and the modules are still torn down, closing and flushing what they hold.
    """
    gc.freeze()
    sys.exit(status)


def train(config: RunConfig, run: RunDirectory, clock: StartupClock) -> int:
    """Train (or resume, or report the finished run) in ``run_dir`` and print the summary."""
    from meltemi.trainer.step.distributed import initialize_from_environment

    initialize_from_environment()
    from meltemi.trainer.trainer import Trainer

    clock.lap("imports")
    return report(Trainer(config, run, clock=clock).run(), config, str(run))


def report(summary: RunSummary, config: RunConfig, run_dir: str) -> int:
    """Print how the run went (the same whether it ran here or on slices); the command's exit status."""
    if summary.already_trained:
        print(
            f"{run_dir} is already trained to step {summary.steps}: raise --trainer.num_train_steps to go on "
            "(--optimizer.extension tail, decay or restretch says how the learning rate goes on)"
        )
    elif summary.stopped_by is not None:
        print(f"stopped by {summary.stopped_by} at step {summary.steps}: saved {summary.last_checkpoint}")
        print("run the same command again to resume")
        return summary.exit_status
    elif summary.start_step == 0:
        print(
            f"steps: {summary.steps}   tokens: {summary.tokens:,}   {summary.tokens_per_second:,.0f} tokens/s"
        )
    else:  # the run as a whole, then what this session did
        print(f"steps: {summary.steps}   tokens: {summary.tokens:,} in all")
        print(summary.session_line())
    print(summary.held_out_line() or "held-out loss: not evaluated")
    print(f"metrics: {summary.metrics_path}")
    if summary.plot_path is not None:
        print(f"loss curve: {summary.plot_path}")
    print(f"last checkpoint: {summary.last_checkpoint}")
    if summary.storage_retries:
        print(f"storage: {summary.storage_retries} request(s) retried after transient errors")
    for note in summary.data_notes:  # said at the start too: a source smaller than a batch, or many epochs
        print(f"data: {note}")
    prompt = config.trainer.sample_prompt
    if summary.replies:
        print("\n".join(summary.reply_lines()))
    elif prompt is not None and summary.last_checkpoint is not None and not _is_chat(summary):
        print(
            f"sample (temperature 0.7, top-k 40, from {prompt!r}):\n"
            + sample(summary.last_checkpoint, prompt)
        )
    return 0


def _is_chat(summary) -> bool:
    """Whether the run trained on conversations (its replies are the sample; none when it was stopped)."""
    from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint

    return inspect_checkpoint(summary.last_checkpoint).chat is not None


def sample(checkpoint: Path, prompt: str, tokens: int = 48) -> str:
    """A short sampled continuation by the trained model (what apps/sample.py prints), seed 0."""
    from meltemi.trainer.generate.generation import sample_checkpoint
    from meltemi.trainer.generate.sampling import SamplingConfig

    result, _ = sample_checkpoint(
        checkpoint, [prompt], SamplingConfig(max_new_tokens=tokens, temperature=0.7, top_k=40)
    )
    return prompt + (result.completions[0].text or "")


def print_sharding(config: RunConfig) -> int:
    """Each parameter's logical axes, sharding and bytes per device on this machine's devices."""
    from meltemi.trainer.step.distributed import initialize_from_environment

    initialize_from_environment()
    from meltemi.trainer.plan.sharding_table import format_report, sharding_report
    from meltemi.trainer.step.mesh import MeshPlan

    layout = MeshPlan.of(config)
    print(format_report(sharding_report(config, layout), layout))
    return 0


def print_schedule(config: RunConfig, steps: Sequence[int]) -> int:
    """``--schedule-at``: one line per step, its learning rate, batch size and mixture (JAX not imported
    for a schedule of segments; ``optimizer.schedule``'s shapes are JAX's functions)."""
    from meltemi.trainer.plan.phases import schedule_line

    lines = [schedule_line(config, step) for step in steps]  # every step checked before any is printed
    print("\n".join(lines))
    return 0


def plan(config: RunConfig, command: Command) -> int:
    """The dry run: fake the target's devices on this CPU, compile the step from shapes, print the plan."""
    from meltemi.trainer.plan.target import planning_devices, target_devices

    target = target_devices(config, command.devices)
    if target.note:
        print(target.note, file=sys.stderr)
    devices = planning_devices(target.count)
    from meltemi.trainer.plan.dry_run import format_plan, plan_run

    run = plan_run(config, devices, mfu=0.5 if command.mfu is None else command.mfu)
    print(format_plan(run))
    if not run.fits:
        print(f"error: {run.budget.shortfall(run.compiled.peak_bytes)}", file=sys.stderr)
        return 2
    return 0


def plan_inference(
    config_path: str,
    overrides: Sequence[str],
    devices: int | None,
    planner: Callable[[RunConfig, Sequence[jax.Device]], InferencePlan],
) -> int:
    """An app's dry run (``evaluate.py``, ``sample.py``): the config loaded with its overrides, the target's
    devices faked, ``planner(config, devices)``'s programs compiled from shapes and its plan printed; exit
    status 2 when the largest does not fit the chip, 1 (one line) on a bad input."""
    from meltemi.datastore import DatastoreError
    from meltemi.trainer.config_io import load_config
    from meltemi.trainer.plan.target import planning_devices, target_devices

    try:
        config = load_config(config_path, overrides)
        target = target_devices(config, devices)
        if target.note:
            print(target.note, file=sys.stderr)
        planned = planner(config, planning_devices(target.count))
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from meltemi.trainer.plan.inference import format_inference_plan

    print(format_inference_plan(planned))
    if not planned.fits:
        print(f"error: {planned.budget.shortfall(planned.peak_bytes)}", file=sys.stderr)
        return 2
    return 0


def verify(location: str) -> int:
    """Recompute the digests the checkpoints of a run (or one ``step-N``) record; 0 when all match."""
    from meltemi.trainer.checkpoint.verify import verify_run

    report = verify_run(location)
    print(report.describe())
    return 0 if report.ok else 1


def _as_typed(path: str | os.PathLike) -> str:
    """``path`` as a user would type it here: relative under the working directory, else absolute.

    >>> _as_typed(os.path.join(os.getcwd(), "configs", "tiny.yaml")) == os.path.join("configs", "tiny.yaml")
    True
    >>> _as_typed("/") == "/"  # not ../../.. from a directory two levels down
    True
    """
    absolute = os.path.abspath(path)
    inside = os.path.commonpath([absolute, os.getcwd()]) == os.getcwd()
    return os.path.relpath(absolute) if inside else absolute
