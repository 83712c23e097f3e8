"""Evaluate a checkpoint on lm-evaluation-harness tasks with the JAX model; print the table, write the JSON.

    uv run apps/evaluate.py [--tasks stdlib_next_line,stdlib_return] [--limit 100]
                            [--out results.json] [--batch-size 16]
    uv run apps/evaluate.py --checkpoint runs/tiny_sft --tasks TASKS --apply-chat-template
                            [--system-instruction TEXT] [--fewshot-as-multiturn]
    uv run apps/evaluate.py --config configs/marin_8b.yaml --dry-run --hardware.chip "TPU v5e"
                            --hardware.devices 16 [--batch-size 8] [--max-length N]

``--checkpoint`` is a run directory (its latest good checkpoint), a ``step-N`` directory or a Hugging Face
directory (by default
``runs/tiny``, ``uv run apps/pretrain.py``'s); its parameters are sharded over every device (never a whole
copy on one). ``--dry-run`` plans without a checkpoint: the scoring program compiled from shapes on the
target's devices (faked on this CPU), its memory per device against the chip's; exit status 2 when it does not
fit. ``--tasks`` takes the harness's task, group or tag names and paths of task YAML files, comma-separated;
by default ``meltemi_stdlib``, every task that ships with the trainer (offline). Needs lm-eval: ``uv pip
install 'meltemi-trainer[eval]'`` (in this repository: see the README's "Evaluating"). When the Hugging Face
Hub cannot be reached (or ``HF_HUB_OFFLINE`` is set), only data sets already cached are read, and a task
whose data is not there fails at once, saying so.
"""

from __future__ import annotations

import argparse
import sys

from meltemi.trainer.generate.flags import (
    PRETRAINED,
    add_checkpoint_flag,
    add_dtype_flag,
    non_negative,
    parse_app_args,
    positive,
)
from meltemi.trainer.harness import SHIPPED_TAG


def _limit(text: str) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return int(value) if value >= 1 and value.is_integer() else value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser, PRETRAINED, dry_run=True)
    add_dtype_flag(parser)
    parser.add_argument(
        "--tasks",
        default=SHIPPED_TAG,
        help="comma-separated task, group or tag names or task YAML paths (default: "
        f"{SHIPPED_TAG}, the tasks that ship with the trainer, which need no download)",
    )
    parser.add_argument(
        "--limit", type=_limit, default=None, help="documents per task, below 1 a fraction (default: all)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="a new file for the harness's JSON results, a path or URL (default: not written)",
    )
    parser.add_argument(
        "--batch-size", type=positive, default=8, help="rows scored per compiled call (default 8)"
    )
    parser.add_argument(
        "--max-length", type=positive, default=None, help="tokens per row (default: the model's max_seq_len)"
    )
    parser.add_argument(
        "--bootstrap-iters",
        type=non_negative,
        default=1000,
        help="resamples for standard errors, 0 for none (default 1000)",
    )
    parser.add_argument(
        "--apply-chat-template",
        action="store_true",
        help="render each prompt with the model's chat template (a model apps/sft.py made; default: off)",
    )
    parser.add_argument(
        "--system-instruction",
        default=None,
        help="with --apply-chat-template, a system message before each prompt (default: none)",
    )
    parser.add_argument(
        "--fewshot-as-multiturn",
        action="store_true",
        help="few-shot examples as turns of the conversation (default: off)",
    )
    args, overrides = parse_app_args(parser, argv)
    if args.dry_run:
        from meltemi.trainer.cli import plan_inference
        from meltemi.trainer.harness.dry_run import plan_scoring

        def planner(config, devices):
            return plan_scoring(config, devices, batch_size=args.batch_size, max_length=args.max_length)

        return plan_inference(args.config, overrides, args.devices, planner)
    specs = [spec.strip() for spec in args.tasks.split(",") if spec.strip()]

    from meltemi.trainer.checkpoint.trained_model import locate_model
    from meltemi.trainer.errors import TrainerError

    try:
        locate_model(args.checkpoint)  # a missing or empty run is said before the harness loads
    except TrainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    from meltemi.trainer.harness.loading import require_harness

    try:
        require_harness("evaluating")
    except TrainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    import meltemi.trainer.harness.model as harness_model
    from meltemi.datastore import DatastoreError
    from meltemi.trainer.harness.results_file import results_file
    from meltemi.trainer.harness.runner import PreparedTasks

    out = None
    try:
        if args.out is not None:  # a new file, local or in a bucket, its folder probed before any work
            out = results_file(args.out)
        tasks = PreparedTasks.of(specs)
        lm = harness_model.MeltemiLM(
            args.checkpoint,
            batch_size=args.batch_size,
            max_length=args.max_length,
            dtype=args.dtype,
            weights=args.weights,
            progress=True,  # a bar over the requests, on a terminal
        )
        if args.apply_chat_template:
            lm.chat_template(True)  # a model without a template is refused before any task runs
        results = tasks.run(
            lm,
            limit=args.limit,
            bootstrap_iters=args.bootstrap_iters,
            apply_chat_template=args.apply_chat_template,
            system_instruction=args.system_instruction,
            fewshot_as_multiturn=args.fewshot_as_multiturn,
        )
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(results.table())
    if out is not None:
        try:
            out.write(results.to_json())
        except (TrainerError, DatastoreError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"results written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
