"""``python -m meltemi.trainer``: train from a YAML config with dotted overrides, or print the sharding plan.

    python -m meltemi.trainer --config configs/tiny.yaml --run-dir runs/tiny --trainer.num_train_steps 100
    python -m meltemi.trainer --config configs/tiny.yaml --print-sharding

Every config field is an override (``--help`` lists them with their defaults); a user error ends with one
line on stderr and exit status 1.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from meltemi.trainer.config_io import describe_fields, load_config
from meltemi.trainer.errors import TrainerError
from meltemi.trainer.startup import StartupClock

USAGE = """usage: python -m meltemi.trainer [--config PATH] [--run-dir DIR] [--print-sharding]
                                  [--no-compile-cache] [--FIELD VALUE ...]

Train a Llama from a YAML config. Any field below can be set with --FIELD VALUE (or --FIELD=VALUE);
values are read as YAML (100, 3e-4, null, [[0, 32], [1000, 64]]).

  --config PATH      a YAML preset (default: every field at its default)
  --run-dir DIR      where metrics, plots and checkpoints go (default: runs/<config name>)
  --print-sharding   print each parameter's axes, sharding and bytes per device, then exit
  --no-compile-cache compile everything afresh and keep nothing on disk (trainer.compile_cache: false)
  --help             this text
"""


def help_text() -> str:
    rows = describe_fields()
    width = max(len(r[0]) for r in rows)
    lines = [USAGE, "fields:"]
    for name, kind, default, description in rows:
        lines.append(f"  --{name:<{width}}  {default:<12} {kind}: {description}")
    return "\n".join(lines)


def split_arguments(argv: Sequence[str]) -> tuple[dict[str, str | bool], list[str]]:
    """The launcher's own flags (``--config``, ``--run-dir``, ``--print-sharding``, ``--help``) and the
    config overrides (everything else), in order; ``--no-compile-cache`` is the override it stands for.

    >>> split_arguments(["--config", "a.yaml", "--trainer.seed", "3", "--print-sharding"])
    ({'config': 'a.yaml', 'print_sharding': True}, ['--trainer.seed', '3'])
    >>> split_arguments(["--no-compile-cache"])
    ({}, ['--trainer.compile_cache', 'false'])
    """
    own: dict[str, str | bool] = {}
    rest: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        name, _, inline = word.partition("=")
        if name == "--no-compile-cache":
            rest += ["--trainer.compile_cache", "false"]
            i += 1
        elif name in ("--help", "-h", "--print-sharding"):
            own[name.lstrip("-").replace("-", "_")] = True
            i += 1
        elif name in ("--config", "--run-dir"):
            if not inline and i + 1 >= len(words):
                raise TrainerError(f"{name} needs a value")
            own[name.lstrip("-").replace("-", "_")] = inline or words[i + 1]
            i += 1 if inline else 2
        else:
            rest.append(word)
            i += 1
    return own, rest


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    clock = StartupClock()
    try:
        own, overrides = split_arguments(argv)
        if own.get("help") or own.get("h"):
            print(help_text())
            return 0
        config_path = own.get("config")
        config = load_config(config_path, overrides)
        clock.lap("config")
        from meltemi.trainer.distributed import initialize_from_environment

        initialize_from_environment()
        from meltemi.trainer.mesh import MeshPlan

        if own.get("print_sharding"):
            from meltemi.trainer.sharding_table import format_report, sharding_report

            plan = MeshPlan.of(config)
            print(format_report(sharding_report(config, plan), plan))
            return 0
        from meltemi.trainer.trainer import Trainer

        clock.lap("imports")
        name = Path(config_path).stem if config_path else "default"
        summary = Trainer(config, own.get("run_dir") or Path("runs") / name, clock=clock).run()
    except TrainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if summary.already_trained:
        print(f"already trained to step {summary.steps}; last checkpoint {summary.last_checkpoint}")
        return 0
    if summary.stopped_by is not None:
        print(
            f"stopped by {summary.stopped_by} at step {summary.steps}; checkpoint {summary.last_checkpoint}; "
            "run the same command again to resume"
        )
        return summary.exit_status
    run = [summary.run_line()] if summary.start_step else []  # a resumed run: the whole, then this session
    files = (
        f"metrics {summary.metrics_path}, plot {summary.plot_path}, last checkpoint {summary.last_checkpoint}"
    )
    print("; ".join([*run, summary.session_line(), summary.held_out_line() or "no held-out loss", files]))
    return 0
