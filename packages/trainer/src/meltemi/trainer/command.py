"""The one command line of the trainer's entry points (``python -m meltemi.trainer``, ``apps/pretrain.py``):
what the command does (its own flags, from :data:`FLAGS`) apart from the config overrides (every other
``--section.field VALUE``), and the help text that lists both.

>>> command = parse_command(["--config", "a.yaml", "--trainer.seed", "3", "--dry-run", "--devices", "8"])
>>> command.config, command.overrides, command.dry_run, command.devices
('a.yaml', ('--trainer.seed', '3'), True, 8)
>>> parse_command(["--no-compile-cache"]).overrides
('--trainer.compile_cache', 'false')
>>> parse_command(["--devices", "eight"])
Traceback (most recent call last):
...
meltemi.trainer.errors.ConfigError: --devices eight: expected an integer
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Sequence

from meltemi.trainer.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Flag:
    """A flag of the command itself (not a config field): its name, its value's name (None: a switch),
    how to read the value, and one line of help."""

    name: str
    metavar: str | None
    help: str
    kind: Callable[[str], object] = str
    group: str = "run"


def _positive(kind: Callable[[str], object]) -> Callable[[str], object]:
    def read(text: str):
        value = kind(text)
        if not value > 0:  # type: ignore[operator]
            raise ValueError("must be positive")
        return value

    read.__name__ = kind.__name__
    return read


def _weights(text: str) -> str:
    if text not in ("ema", "raw"):
        raise ValueError("ema (the average of the weights the base kept) or raw (its weights as trained)")
    return text


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError("must be a fraction in (0, 1], e.g. 0.5")
    return value


def _steps(text: str) -> tuple[int, ...]:
    """Comma-separated step numbers: ``0,1000,660_001``."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    steps = tuple(int(word) for word in words)
    if not steps or any(step < 0 for step in steps):
        raise ValueError("give steps as comma-separated whole numbers from 0, e.g. 0,1000,660001")
    return steps


FLAGS: tuple[Flag, ...] = (
    Flag("--config", "PATH", "a YAML preset (default: {default_config})"),
    Flag("--run-dir", "DIR", "where the config, metrics, plot and checkpoints go (default: runs/<config name>)"),  # noqa: E501
    Flag("--no-compile-cache", None, "compile everything afresh, keep nothing on disk (trainer.compile_cache)"),  # noqa: E501
    Flag("--print-sharding", None, "print each parameter's axes, sharding and bytes per device, then exit"),
    Flag("--verify", "RUN", "recompute the digests every checkpoint of RUN (a run or step-N directory) records"),  # noqa: E501
    Flag("--help", None, "this text"),
    Flag("--schedule-at", "STEPS", "print the learning rate, batch size and mixture weights of each of the comma-separated STEPS, then exit", _steps),  # noqa: E501
    Flag("--dry-run", None, "compile the train step ahead of time on fake CPU devices and print the plan", group="dry run"),  # noqa: E501
    Flag("--devices", "N", "devices to plan for (default: hardware.devices, or the mesh's size, else 1)", _positive(int), "dry run"),  # noqa: E501
    Flag("--mfu", "X", "the model FLOPs utilisation the step time assumes, in (0, 1] (default 0.5)", _fraction, "dry run"),  # noqa: E501
    Flag("--launch", "ray", "train on slices through Ray, one process per host (see the README)", group="launch"),  # noqa: E501
    Flag("--slices", "N", "how many slices (default 1)", int, "launch"),
    Flag("--min-slices", "M", "start (and go on) with as few as M slices when fewer are free", int, "launch"),
    Flag("--slice-type", "TYPE", "v4-16, v5litepod-256, gpu-8, ... (default cpu-1: local fake slices)", group="launch"),  # noqa: E501
    Flag("--address", "ADDR", "a running Ray cluster (default: start a local cluster of fake CPU slices)", group="launch"),  # noqa: E501
    Flag("--devices-per-host", "D", "fake CPU devices per host of a cpu-* slice (default 4)", int, "launch"),
    Flag("--acquire-timeout", "S", "how long to wait for the slices, seconds (default 600)", float, "launch"),
    Flag("--scale-up-every", "S", "with fewer than --slices, look for more every S seconds (default 300)", float, "launch"),  # noqa: E501
    Flag("--max-failures", "N", "restart the job after an exception in the training up to N times (default 0)", int, "launch"),  # noqa: E501
    Flag("--base", "RUN_OR_HF_DIR", "the model to fine-tune: a run, a step-N checkpoint or a Hugging Face directory, local or in a bucket (trainer.initialize_from)", group="fine-tuning"),  # noqa: E501
    Flag("--data", "PATHS", "chat data, comma-separated JSON, JSONL, Parquet or Arrow files, directories or URLs with a messages field (or a prompt and a completion, ShareGPT's conversations, Alpaca's instruction and output); each one a source of equal weight (data.sources)", group="fine-tuning"),  # noqa: E501
    Flag("--weights", "ema|raw", "which of a base run's weights to start from: ema, the moving average it kept (optimizer.ema; the default when it kept one), or raw, its weights as trained (trainer.initialize_from.weights)", _weights, "fine-tuning"),  # noqa: E501
    Flag("--subset", "NAME", "the subset of --data's data sets to read, as the configs of their README.md name it (load_dataset's name; data.sources.NAME.subset)", group="fine-tuning"),  # noqa: E501
)  # fmt: skip
STORE_BUILD_FLAGS: tuple[Flag, ...] = (
    Flag("--config", "PATH", "the run config whose stores to build (default: {default_config})"),
    Flag("--dry-run", None, "print, per source, its inputs, its store and whether it is built already; build nothing"),  # noqa: E501
    Flag("--ray", "ADDRESS", "build on the Ray cluster at ADDRESS (auto, or HOST:PORT; default: this machine's processes)"),  # noqa: E501
    Flag("--help", None, "this text"),
)  # fmt: skip
"""The flags of the store-building command (``apps/build_stores.py``): the same parser, its own flags."""
_BY_NAME = {flag.name: flag for flag in FLAGS}
_ALIASES = {"-h": "--help"}


@dataclasses.dataclass(frozen=True)
class LaunchFlags:
    """``--launch ray`` and how: the launcher's flags as given (None: its default)."""

    launcher: str
    slices: int | None = None
    min_slices: int | None = None
    slice_type: str | None = None
    address: str | None = None
    devices_per_host: int | None = None
    acquire_timeout: float | None = None
    scale_up_every: float | None = None
    max_failures: int | None = None


@dataclasses.dataclass(frozen=True)
class Command:
    """What the command line asks for: the command's flags, and the config overrides in their order."""

    overrides: tuple[str, ...] = ()
    config: str | None = None
    run_dir: str | None = None
    print_sharding: bool = False
    verify: str | None = None
    help: bool = False
    dry_run: bool = False
    devices: int | None = None
    mfu: float | None = None
    launch: LaunchFlags | None = None
    ray: str | None = None
    schedule_at: tuple[int, ...] | None = None


def parse_command(argv: Sequence[str], *, fine_tuning: bool = False, store_builds: bool = False) -> Command:
    """Split ``argv`` into the command's flags (each read and checked) and the config overrides.

    A flag of the command may be given as ``--flag VALUE`` or ``--flag=VALUE``; anything else starting with
    ``--`` is an override, left for :func:`meltemi.trainer.config_io.load_config` to check against the
    config's fields. A launcher flag without ``--launch`` is an error; the fine-tuning flags (``--base``,
    ``--data``) are the fine-tuning command's (``fine_tuning``), and become overrides of the fields they set.
    The store-building command (``store_builds``) has its own flags (``STORE_BUILD_FLAGS``).

    >>> command = parse_command(["--config", "r.yaml", "--ray", "auto", "--dry-run"], store_builds=True)
    >>> command.config, command.ray, command.dry_run
    ('r.yaml', 'auto', True)
    >>> parse_command(["--run-dir", "runs/x"], store_builds=True)
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.ConfigError: --run-dir: a flag of the training commands, not of this one (its \
flags: --config, --dry-run, --ray, --help)
    """
    table = {flag.name: flag for flag in STORE_BUILD_FLAGS} if store_builds else _BY_NAME
    values: dict[str, object] = {}
    overrides: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        name, has_inline, inline = words[i].partition("=")
        flag = table.get(_ALIASES.get(name, name))
        if flag is None:
            if name in _BY_NAME or (name == "--ray" and not store_builds):
                raise _not_this_commands(name, store_builds)
            if name.startswith("--") and _not_a_field(name):
                raise _unknown_flag(name, fine_tuning, table.values())
            overrides.append(words[i])
            i += 1
            continue
        if flag.group == "fine-tuning" and not fine_tuning:
            field = {
                "--base": "trainer.initialize_from",
                "--weights": "trainer.initialize_from.weights",
                "--subset": "data.sources.NAME.subset",
            }.get(flag.name, "data.sources")
            raise ConfigError(f"{flag.name}: a flag of apps/sft.py; here, set --{field}")
        if flag.name == "--no-compile-cache":
            overrides += ["--trainer.compile_cache", "false"]
        elif flag.metavar is None:
            if has_inline:
                raise ConfigError(f"{flag.name} takes no value (got {words[i]!r})")
            values[flag.name] = True
        else:
            if has_inline:
                text = inline
            elif i + 1 < len(words) and not words[i + 1].startswith("--"):
                text = words[i + 1]
                i += 1
            else:
                raise ConfigError(f"{flag.name} needs a value: {flag.name} {flag.metavar}")
            values[flag.name] = _read(flag, text)
        i += 1
    return _command(values, tuple(_fine_tuning_overrides(values) + overrides))


SECTIONS = ("model", "optimizer", "trainer", "data", "hardware", "eval")  # RunConfig's, settable whole


def _not_a_field(name: str) -> bool:
    """Whether ``--name`` can be no config override: those name a field by its dotted path, or a section."""
    bare = name[2:]
    return "." not in bare and bare.replace("-", "_") not in SECTIONS


def _not_this_commands(name: str, store_builds: bool) -> ConfigError:
    """A flag of the training commands given to the store-building one, or the other way round."""
    if store_builds:
        flags = ", ".join(flag.name for flag in STORE_BUILD_FLAGS)
        return ConfigError(f"{name}: a flag of the training commands, not of this one (its flags: {flags})")
    return ConfigError(
        f"{name}: a flag of apps/build_stores.py; a run on a Ray cluster (--launch ray --address ADDR) "
        "builds its missing stores there itself"
    )


def _unknown_flag(name: str, fine_tuning: bool = False, flags: Iterable[Flag] = FLAGS) -> ConfigError:
    """A word that is neither a flag of the command nor a config field, with what it likely meant
    (``flag_guess``): its flag respelled (``--dry_run``), else what it is here when another tool names a
    setting so, else the fields of its name in any section, else the nearest flag.

    >>> str(_unknown_flag("--dryrun"))
    '--dryrun: neither a flag of this command nor a config field (did you mean --dry-run?)'
    >>> str(_unknown_flag("--seed"))
    '--seed: neither a flag of this command nor a config field (did you mean --trainer.seed?)'
    >>> str(_unknown_flag("--max_steps"))
    "--max_steps: neither a flag of this command nor a config field; max_steps (transformers' \
TrainingArguments) is --trainer.num_train_steps here"
    """
    from meltemi.trainer.config_io import describe_fields
    from meltemi.trainer.flag_guess import Takes, guess

    leaf = name[2:].replace("-", "_")
    fields = [f"--{row[0]}" for row in describe_fields() if row[0].rsplit(".", 1)[-1] == leaf]
    takes = Takes(flags=tuple(flag.name for flag in flags), fields=True, fine_tuning=fine_tuning)
    hint = guess(name, takes, near=fields[:2]).said(otherwise="; --help lists both")
    return ConfigError(f"{name}: neither a flag of this command nor a config field{hint}")


def _fine_tuning_overrides(values: dict[str, object]) -> list[str]:
    """The config overrides ``--base`` and ``--data`` stand for (before the other overrides, which win);
    with ``--data`` the summary replies to the user's own held-out conversation (``trainer.reply_to``), not to
    the preset's prompt, written for its own corpus.

    >>> _fine_tuning_overrides({"--base": "runs/tiny", "--data": "a/chat.jsonl,b/chat.jsonl"})
    ['--trainer.initialize_from.path', 'runs/tiny', '--data.sources', '{"chat": {"corpus": "a/chat.jsonl", \
"format": "chat"}, "chat-2": {"corpus": "b/chat.jsonl", "format": "chat"}}', '--trainer.reply_to', 'held_out']
    >>> _fine_tuning_overrides({"--data": "HuggingFaceTB/smoltalk", "--subset": "all"})[1]
    '{"smoltalk": {"corpus": "HuggingFaceTB/smoltalk", "format": "chat", "subset": "all"}}'
    """
    words: list[str] = []
    if "--base" in values:
        words += ["--trainer.initialize_from.path", str(values["--base"])]
    if "--weights" in values:
        words += ["--trainer.initialize_from.weights", str(values["--weights"])]
    if "--data" in values:
        paths = [path.strip() for path in str(values["--data"]).split(",") if path.strip()]
        if not paths:
            raise ConfigError("--data: name at least one file, directory or URL of conversations")
        sources: dict[str, dict[str, str]] = {}
        for path in paths:
            base = path.rstrip("/").rpartition("/")[2].split(".")[0] or "chat"
            name, n = base, 1
            while name in sources:
                n += 1
                name = f"{base}-{n}"
            sources[name] = {"corpus": path, "format": "chat"}
            sources[name] |= {"subset": str(values["--subset"])} if "--subset" in values else {}
        words += ["--data.sources", json.dumps(sources), "--trainer.reply_to", "held_out"]
    elif "--subset" in values:
        raise ConfigError(
            "--subset: the subset of --data's data sets: give it with --data (or data.sources.NAME.subset)"
        )
    return words


def _read(flag: Flag, text: str) -> object:
    try:
        return flag.kind(text)
    except ValueError as e:
        if "invalid literal" in str(e) or "could not" in str(e):  # not a number at all
            kind = {
                "int": "an integer",
                "float": "a number",
                "_fraction": "a number",
                "_steps": "comma-separated steps, e.g. 0,1000,660001",
            }.get(flag.kind.__name__, "a value")
            raise ConfigError(f"{flag.name} {text}: expected {kind}") from None
        raise ConfigError(f"{flag.name} {text}: {e}") from None  # a number out of the flag's range


def _command(values: dict[str, object], overrides: tuple[str, ...]) -> Command:
    if "--verify" in values:  # a check of what RUN recorded: nothing else on the line would be used
        others = [name for name in values if name not in ("--verify", "--help")]
        others += [word.partition("=")[0] for word in overrides if word.startswith("--")]
        if others:
            raise ConfigError(f"--verify RUN checks RUN as it recorded itself: not with {', '.join(others)}")
    launch_values = {f.name: values[f.name] for f in FLAGS if f.group == "launch" and f.name in values}
    launch = None
    if launch_values:
        if "--launch" not in launch_values:
            given = ", ".join(launch_values)
            raise ConfigError(f"{given}: only with --launch ray")
        fields = {k.lstrip("-").replace("-", "_"): v for k, v in launch_values.items() if k != "--launch"}
        launch = LaunchFlags(launcher=str(launch_values["--launch"]), **fields)
    dry = [f.name for f in FLAGS if f.group == "dry run" and f.name != "--dry-run" and f.name in values]
    if dry and not values.get("--dry-run"):
        raise ConfigError(f"{', '.join(dry)}: only with --dry-run")
    return Command(
        overrides=overrides,
        config=values.get("--config"),
        run_dir=values.get("--run-dir"),
        print_sharding=bool(values.get("--print-sharding")),
        verify=values.get("--verify"),
        help=bool(values.get("--help")),
        dry_run=bool(values.get("--dry-run")),
        devices=values.get("--devices"),
        mfu=values.get("--mfu"),
        launch=launch,
        ray=values.get("--ray"),
        schedule_at=values.get("--schedule-at"),
    )


TRAINING = [
    "Train a Llama from a YAML config. Any config field below can be set with --FIELD VALUE (or",
    "--FIELD=VALUE); values are read as YAML (100, 3e-4, null, [[0, 32], [1000, 64]]), and a list field",
    "takes several words (--data.stores A B). Rerunning the same command resumes the run.",
]
STORE_BUILDS = [
    "Build the token stores of a run config's sources that name their raw inputs (data.sources.NAME.",
    "build_from) and are not built yet, each at its data.sources.NAME.store, side by side, with the run's",
    "data.tokenizer; a store built already is skipped, and rerunning the command resumes a build. Any",
    "config field below can be set with --FIELD VALUE (or --FIELD=VALUE), as for training.",
]


def help_text(
    prog: str,
    default_config: str | None,
    *,
    fine_tuning: bool = False,
    config: str | None = None,
    store_builds: bool = False,
) -> str:
    """The usage line, the command's flags by group, then every config field with its value in ``config``
    (the ``--config`` given, else ``default_config``), or its default when there is none."""
    from meltemi.trainer.config_io import describe_fields, load_config

    if store_builds:
        lines = [
            f"usage: {prog} [--config PATH] [--FIELD VALUE ...] [--dry-run] [--ray ADDRESS]",
            "",
            *STORE_BUILDS,
        ]
        lines += ["", "flags:", *_flag_lines(STORE_BUILD_FLAGS, default_config)]
    else:
        usage = f"usage: {prog} [--config PATH] [--run-dir DIR] [--FIELD VALUE ...] [--dry-run ...]"
        lines = [f"{usage} [--launch ray ...]", "", *TRAINING]
        groups = ("fine-tuning",) * fine_tuning + ("run", "dry run", "launch")
        for group in groups:
            lines += ["", f"{group} flags:" if group != "run" else "flags:"]
            lines += _flag_lines([flag for flag in FLAGS if flag.group == group], default_config)
    preset, heading = config or default_config, "config fields (their defaults):"
    values = None
    if preset is not None:
        try:
            values = load_config(preset).model_dump(mode="json")
            heading = f"config fields (the values of {preset}):"
        except ConfigError as e:
            heading = f"config fields (their defaults; {preset} cannot be read: {e}):"
    rows = describe_fields(values=values)
    width = max(len(r[0]) for r in rows)
    lines += ["", heading]
    lines += [f"  --{name:<{width}}  {default:<12} {kind}: {text}" for name, kind, default, text in rows]
    return "\n".join(lines)


def _flag_lines(flags: Iterable[Flag], default_config: str | None) -> list[str]:
    """Each flag's line of the help text: its name and value, and what it does."""
    lines = []
    for flag in flags:
        shown = f"{flag.name} {flag.metavar}" if flag.metavar else flag.name
        text = flag.help.format(default_config=default_config or "every field at its default")
        lines.append(f"  {shown:<22} {text}")
    return lines
