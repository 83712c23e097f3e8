"""The flags the apps that read a trained model share (``sample.py``, ``chat.py``, ``export_hf.py``,
``evaluate.py``): the checkpoint to read and, for the two that generate, the sampling settings, with one
description and per-app defaults. Light to import, so ``--help`` answers before JAX loads.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> add_checkpoint_flag(parser); add_sampling_flags(parser, max_new_tokens=16, temperature=0.5)
>>> args = parser.parse_args(["--checkpoint", "runs/tiny", "--top-k", "40"])
>>> sampling_settings(args)
(16, 0.5, 40, None, 0)
"""

from __future__ import annotations

import argparse

CHECKPOINT_HELP = (
    "a run directory (its latest good checkpoint) or a step-N directory, local or in a bucket (required)"
)


def add_checkpoint_flag(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint``: the run or ``step-N`` directory to read (required)."""
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)


def add_sampling_flags(parser: argparse.ArgumentParser, *, max_new_tokens: int, temperature: float) -> None:
    """``--max-new-tokens``, ``--temperature``, ``--top-k``, ``--top-p`` and ``--seed``, each described with
    its default (an app's own for the first two)."""
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=max_new_tokens,
        help=f"the generated text's length at most, in tokens (default {max_new_tokens})",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=temperature,
        help=f"0 is greedy; higher, more varied (default {temperature:g})",
    )
    parser.add_argument(
        "--top-k", type=int, default=None, help="draw from the k likeliest tokens only (default: all)"
    )
    parser.add_argument(
        "--top-p",
        type=float,
        default=None,
        help="draw from the fewest tokens reaching probability p (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of the draws (default 0)")


def sampling_settings(args: argparse.Namespace) -> tuple[int, float, int | None, float | None, int]:
    """The parsed sampling flags, in the order of ``SamplingConfig``'s fields."""
    return args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed
