"""Continue a prompt with a trained checkpoint; only the continuation goes to stdout.

    uv run apps/sample.py [--prompt "def "] [--checkpoint RUN] [--max-new-tokens 64] [--temperature 0]
    uv run apps/sample.py --config configs/marin_8b.yaml --dry-run --hardware.chip "TPU v5e"
                          --hardware.devices 16 [--max-new-tokens 64]

``--checkpoint`` is a run directory (its latest good checkpoint), a ``step-N`` directory or a Hugging Face
directory, local or in a bucket (``s3://``, ``gs://``; by default ``runs/tiny``, where ``uv run
apps/pretrain.py`` writes), its parameters sharded over every device; ``--prompt`` is by default the run's
``trainer.sample_prompt`` (what its summary's sample continued), its last token healed (taken back when
longer tokens begin with its text, the first new token one of those: ``--no-token-healing`` runs it as
encoded); ``--temperature 0`` is greedy. The
continuation is written as it is generated; progress and the speed go to stderr. ``--dry-run`` plans without a
checkpoint: the prefill of the longest prompt the context allows and the decode loop, compiled from shapes on
the target's devices (faked on this CPU), their memory per device against the chip's; exit status 2 when they
do not fit.
"""

from __future__ import annotations

import argparse
import sys

from meltemi.trainer.generate.flags import (
    PRETRAINED,
    add_checkpoint_flag,
    add_dtype_flag,
    add_sampling_flags,
    parse_app_args,
    sampling_settings,
    text_or_stdin,
)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser, PRETRAINED, dry_run=True)
    add_dtype_flag(parser)
    parser.add_argument(
        "--prompt",
        type=text_or_stdin,
        help="the text to continue, or - to read it from stdin (default: the run's trainer.sample_prompt)",
    )
    parser.add_argument(
        "--no-token-healing",
        action="store_true",
        help="run the prompt's tokens as encoded (default: its last token healed, so that a prompt ending in "
        "a space goes on with a word)",
    )
    add_sampling_flags(parser, max_new_tokens=64, temperature=0.8)
    args, overrides = parse_app_args(parser, argv)
    if args.dry_run:
        from meltemi.trainer.cli import plan_inference
        from meltemi.trainer.generate.dry_run import plan_sampling

        def planner(config, devices):
            return plan_sampling(config, devices, max_new_tokens=args.max_new_tokens)

        return plan_inference(args.config, overrides, args.devices, planner)

    from meltemi.datastore import DatastoreError
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.generate.generation import recorded_sample_prompt, sample_checkpoint
    from meltemi.trainer.generate.sampling import SamplingConfig
    from meltemi.trainer.generate.streaming import to_stdout

    try:
        settings = SamplingConfig(*sampling_settings(args))
        prompt = args.prompt
        if prompt is None:
            prompt = recorded_sample_prompt(args.checkpoint)
            print(f"continuing the run's trainer.sample_prompt: {prompt!r}", file=sys.stderr)
        result, path = sample_checkpoint(
            args.checkpoint,
            [prompt],
            settings,
            warn=lambda m: print(m, file=sys.stderr),
            write=to_stdout,
            dtype=args.dtype,
            heal=not args.no_token_healing,
            weights=args.weights,
        )
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    took = f"{result.new_tokens} tokens in {result.seconds:.1f} s"
    print(f"{path}: {took} ({result.tokens_per_second:.1f} tokens/s, compiling included)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
