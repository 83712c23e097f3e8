"""The flags the apps that read a trained model share (``sample.py``, ``chat.py``, ``export_hf.py``,
``evaluate.py``): the checkpoint to read (by default the run the newcomer's commands train) and which of its
weights (a run's moving average of them, when it kept one, or its weights as trained), for the two
that generate the sampling settings, the dtype a model is computed in, and for the two that can plan without
a checkpoint the dry run's; with one description and per-app defaults. Light to import, so ``--help``
answers before JAX loads.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_checkpoint_flag(parser, PRETRAINED); add_sampling_flags(parser, max_new_tokens=16, temperature=0.5)
>>> args = parser.parse_args(["--checkpoint", "runs/tiny", "--top-k", "40", "--stop", r"\\n\\n"])
>>> sampling_settings(args)
(16, 0.5, 40, None, 0, ('\\n\\n',))
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from meltemi.trainer.flag_guess import Takes, guess, is_flag


@dataclasses.dataclass(frozen=True)
class DefaultRun:
    """The run an app reads when ``--checkpoint`` is not given: where the command that trains it writes by
    default (``runs/<its config's name>``, relative to the working directory, as that command's is)."""

    directory: str
    trained_by: str


PRETRAINED = DefaultRun("runs/tiny", "uv run apps/pretrain.py")
FINE_TUNED = DefaultRun("runs/tiny_sft", "uv run apps/sft.py")

CHECKPOINT_HELP = (
    "a run directory (its latest good checkpoint), a step-N directory or a Hugging Face directory, local "
    "or in a bucket, or a model's Hub name (OWNER/NAME) in this machine's Hugging Face cache"
)
WEIGHTS = ("ema", "raw")  # what --weights may pick: a run's moving average of its weights, or them raw
DTYPES = ("float32", "bfloat16", "float16")  # what --dtype may hold and compute a model in


def add_checkpoint_flag(
    parser: argparse.ArgumentParser, default: DefaultRun, *, dry_run: bool = False
) -> None:
    """``--checkpoint``: the run, ``step-N`` or Hugging Face directory to read, ``default`` when not given
    (read it with ``checkpoint_of``), and ``--weights``: which of its weights (None: the moving average
    when the run kept one); with ``dry_run``, the app also takes the dry run's flags, and reads no
    checkpoint with them."""
    parser.add_argument(
        "--checkpoint",
        help=f"{CHECKPOINT_HELP} (default: {default.directory}, which {default.trained_by} trains)",
    )
    parser.add_argument(
        "--weights",
        choices=WEIGHTS,
        default=None,
        help="ema: the moving average of the weights the run kept (optimizer.ema), raw: its weights as "
        "trained (default: ema when the run kept one, else raw)",
    )
    parser.set_defaults(default_run=default)
    if not dry_run:
        return
    group = parser.add_argument_group(
        "dry run",
        "plan on the target's devices without a checkpoint; any --section.field VALUE overrides the config",
    )
    group.add_argument(
        "--dry-run",
        action="store_true",
        help="compile from shapes on fake CPU devices, print the memory (default: off)",
    )
    group.add_argument("--config", help="the run's YAML config (required with --dry-run)")
    group.add_argument(
        "--devices",
        type=positive,
        help="devices to plan for (default: hardware.devices, or the mesh's size, else 1)",
    )


def checkpoint_of(parser: argparse.ArgumentParser, args: argparse.Namespace, *, check: bool = True) -> str:
    """The ``--checkpoint`` given, else the app's default run: a usage error (exit 2) when that does not
    exist, saying which command trains it; with ``check``, a given location that is a file, does not exist
    or whose bucket cannot be read is one line and exit 1 (``checkpoint.locate.checked_location``), before
    the app imports JAX.

    >>> parser = argparse.ArgumentParser(prog="chat.py")
    >>> add_checkpoint_flag(parser, FINE_TUNED)
    >>> checkpoint_of(parser, parser.parse_args(["--checkpoint", "memory://bucket/run"]))
    'memory://bucket/run'
    """
    if args.checkpoint is None:
        default: DefaultRun = args.default_run
        if not Path(default.directory).exists():
            parser.error(
                f"--checkpoint not given, and its default {default.directory} does not exist: train it with "
                f"{default.trained_by}, or name a run or step-N directory with --checkpoint"
            )
        return default.directory
    if check:
        from meltemi.datastore.errors import DatastoreError
        from meltemi.trainer.checkpoint.locate import checked_location
        from meltemi.trainer.errors import TrainerError

        try:
            checked_location(args.checkpoint)
        except (TrainerError, DatastoreError) as e:
            parser.exit(1, f"error: {e}\n")
    return args.checkpoint


def parse_app_args(
    parser: argparse.ArgumentParser, argv: list[str], *, required: tuple[str, ...] = ()
) -> tuple[argparse.Namespace, list[str]]:
    """``argv`` parsed, with the config overrides a dry run takes (``--section.field VALUE``) apart;
    without ``--dry-run`` the ``required`` flags are required and ``args.checkpoint`` is ``checkpoint_of``'s;
    with it, ``--config`` is required, and overrides are taken only with it (each a usage error that exits 2,
    as argparse's own).

    >>> parser = argparse.ArgumentParser()
    >>> add_checkpoint_flag(parser, PRETRAINED, dry_run=True)
    >>> parse_app_args(parser, ["--dry-run", "--config", "a.yaml", "--hardware.devices", "16"])[1]
    ['--hardware.devices', '16']
    """
    args, overrides = parser.parse_known_args(argv)
    if args.dry_run:
        if args.config is None:
            parser.error("--dry-run needs --config: the run's YAML config to plan for")
        if args.checkpoint is not None:
            parser.error("--checkpoint: not with --dry-run, which plans from --config alone")
        if args.weights is not None:
            parser.error("--weights: not with --dry-run, which plans from --config alone")
        from meltemi.trainer.command import parse_command
        from meltemi.trainer.errors import ConfigError

        try:  # the trainer's one command line tells overrides from flags, and names a word that is neither
            command = parse_command(overrides)
        except ConfigError as e:
            parser.error(str(e))
        flags = [word for word in overrides if word.startswith("--") and word not in command.overrides]
        refuse_unknown(parser, flags)
        return args, list(command.overrides)
    refuse_unknown(parser, overrides)
    planning = [f"--{flag}" for flag in ("config", "devices") if getattr(args, flag) is not None]
    if planning:
        parser.error(f"{', '.join(planning)}: only with --dry-run")
    missing = [f"--{flag.replace('_', '-')}" for flag in required if getattr(args, flag) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    args.checkpoint = checkpoint_of(parser, args)
    return args, overrides


def refuse_unknown(parser: argparse.ArgumentParser, words: list[str]) -> None:
    """A usage error (exit 2) for ``words`` that ``parser`` did not take (``parse_known_args``' rest), each
    flag answered with what the user likely meant (``flag_guess``: our spelling of it, ``--max_new_tokens``;
    our name for another tool's flag, llama.cpp's ``--n-predict``; a near flag; or that config fields are set
    only in a dry run), a value without its flag with what it likely is; nothing when ``words`` is empty.

    >>> parser = argparse.ArgumentParser(prog="sample.py")
    >>> _ = parser.add_argument("--max-new-tokens")
    >>> print(_unknown_word_hint(parser, "--max_new_tokens=20"))
    --max_new_tokens: not a flag of this command; did you mean --max-new-tokens?
    """
    if not words:
        return
    flags = [word for word in words if is_flag(word)]
    if not flags:
        value = guess(words[0], _takes(parser)).said()
        parser.error(f"unrecognized arguments: {' '.join(words)}{value}")
    parser.error("; ".join(_unknown_word_hint(parser, word) for word in flags))


def _unknown_word_hint(parser: argparse.ArgumentParser, word: str) -> str:
    """What ``word``, a flag ``parser`` does not have, likely meant."""
    hint = guess(word, _takes(parser)).said(otherwise="; --help lists them", parenthesized=False)
    return f"{word.partition('=')[0]}: not a flag of this command{hint}"


def _takes(parser: argparse.ArgumentParser) -> Takes:
    """What an app takes, for ``flag_guess``: every flag its usage shows (no config fields: a dry run's
    overrides are the trainer's command line's to check)."""
    return Takes(flags=tuple(sorted(set(re.findall(r"--[\w-]+", parser.format_usage())))))


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``type=positive``).

    >>> positive("8")
    8
    """
    return _at_least(1, text)


def non_negative(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    return _at_least(0, text)


def non_empty(value: str) -> str:
    """An argparse type: text that is not empty (an unset shell variable, say, is refused, not sent).

    >>> non_empty("def ")
    'def '
    """
    if not value:
        raise argparse.ArgumentTypeError("must not be empty")
    return value


STDIN = "-"  # a prompt or message given as this is read from stdin


def text_or_stdin(value: str) -> str:
    """An argparse type for a prompt or message: the text given, or for ``-`` all of stdin with its trailing
    newlines dropped (as ``"$(cat FILE)"`` drops them: ``echo`` adds one), never empty.

    >>> text_or_stdin("def ")
    'def '
    >>> import io, sys
    >>> given, sys.stdin = sys.stdin, io.StringIO("def f():\\n    pass\\n\\n")
    >>> text_or_stdin("-")
    'def f():\\n    pass'
    >>> sys.stdin = given
    """
    if value != STDIN:
        return non_empty(value)
    text = sys.stdin.read().rstrip("\n")
    if not text:
        raise argparse.ArgumentTypeError("- reads the text from stdin, which held none")
    return text


def _at_least(minimum: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be {'positive' if minimum else 'at least 0'}, got {text}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if value != value:
        raise argparse.ArgumentTypeError("must be a number, got nan")
    return value


def _temperature(text: str) -> float:
    value = _number(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of at least 0 (0: greedy), got {text}")
    return value


def _probability(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def add_dtype_flag(parser: argparse.ArgumentParser) -> None:
    """``--dtype``: the dtype a model is held and computed in, for a model saved in another (a bfloat16
    model is faster in float32 on most CPUs, whose bfloat16 matmuls are emulated)."""
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help="the dtype the model is held and computed in (default: the run's; a Hugging Face model's "
        "torch_dtype); float32 is the fast one on most CPUs",
    )


def add_sampling_flags(parser: argparse.ArgumentParser, *, max_new_tokens: int, temperature: float) -> None:
    """``--max-new-tokens``, ``--temperature``, ``--top-k``, ``--top-p``, ``--seed`` and ``--stop``, each
    described with its default (an app's own for the first two)."""
    parser.add_argument(
        "--max-new-tokens",
        type=positive,
        default=max_new_tokens,
        help=f"the generated text's length at most, in tokens (default {max_new_tokens})",
    )
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=temperature,
        help=f"0 is greedy; higher, more varied (default {temperature:g})",
    )
    parser.add_argument(
        "--top-k", type=positive, default=None, help="draw from the k likeliest tokens only (default: all)"
    )
    parser.add_argument(
        "--top-p",
        type=_probability,
        default=None,
        help="draw from the fewest tokens reaching probability p (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of the draws (default 0)")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        type=_unescaped,
        metavar="TEXT",
        help=r"end the text before TEXT (\n: a newline, \t: a tab); repeat for several (default: none)",
    )


def _unescaped(text: str) -> str:
    r"""``text`` with ``\n``, ``\t`` and ``\\`` read as a newline, a tab and a backslash, as a shell's
    quotes leave them.

    >>> _unescaped(r"\n\ndef"), _unescaped(r"a\\nb \x")
    ('\n\ndef', 'a\\nb \\x')
    """
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}.get(m[1], m[0]), non_empty(text))


def sampling_settings(
    args: argparse.Namespace,
) -> tuple[int, float, int | None, float | None, int, tuple[str, ...]]:
    """The parsed sampling flags, in the order of ``SamplingConfig``'s fields."""
    return args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed, tuple(args.stop)
