"""Evaluate a checkpoint on lm-evaluation-harness tasks with the JAX model; print the table, write the JSON.

    uv run apps/evaluate.py --checkpoint runs/tiny --tasks stdlib_next_line,stdlib_return [--limit 100]
                            [--out results.json] [--batch-size 16]

``--checkpoint`` is a run directory (its latest good checkpoint) or a ``step-N`` directory. ``--tasks`` takes
the harness's task, group or tag names and paths of task YAML files, comma-separated; ``meltemi_stdlib`` is
every task that ships with the trainer (offline). Needs lm-eval: ``uv pip install 'meltemi-trainer[eval]'``
(in this repository: see the README's "Evaluating"). Without network, set ``HF_DATASETS_OFFLINE=1`` so that a
task whose data set is not cached fails at once instead of after the hub's retries.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _limit(text: str) -> int | float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return int(value) if value >= 1 and value.is_integer() else value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a run directory or a step-N directory")
    parser.add_argument("--tasks", required=True, help="comma-separated task names or task YAML paths")
    parser.add_argument("--limit", type=_limit, default=None, help="documents per task (below 1: a fraction)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the harness's JSON results")
    parser.add_argument("--batch-size", type=int, default=8, help="rows scored per compiled call")
    parser.add_argument("--max-length", type=int, default=None, help="tokens per row (default: the model's)")
    parser.add_argument("--bootstrap-iters", type=int, default=1000, help="resamples for standard errors")
    args = parser.parse_args(argv)
    specs = [spec.strip() for spec in args.tasks.split(",") if spec.strip()]

    from meltemi.trainer.errors import TrainerError

    try:
        import meltemi.trainer.harness.model as harness_model
        from meltemi.trainer.harness.runner import PreparedTasks
    except ModuleNotFoundError as error:
        print(f"error: evaluating needs lm-evaluation-harness ({error.name} is not installed): "
              "uv pip install 'meltemi-trainer[eval]'", file=sys.stderr)  # fmt: skip
        return 1
    try:
        tasks = PreparedTasks.of(specs)
        lm = harness_model.MeltemiLM(args.checkpoint, batch_size=args.batch_size, max_length=args.max_length)
        results = tasks.run(lm, limit=args.limit, bootstrap_iters=args.bootstrap_iters)
    except TrainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(results.table())
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        aside = args.out.with_name(f".{args.out.name}.{os.getpid()}")
        aside.write_text(results.to_json())
        aside.replace(args.out)
        print(f"results written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
