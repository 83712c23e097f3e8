"""Continue a prompt with a trained checkpoint; only the continuation goes to stdout.

    uv run apps/sample.py --checkpoint runs/tiny --prompt "def " [--max-new-tokens 64] [--temperature 0]

``--checkpoint`` is a run directory (its latest good checkpoint) or a ``step-N`` directory, local or in a
bucket (``s3://``, ``gs://``); ``--temperature 0`` is greedy. Progress and the speed go to stderr.
"""

from __future__ import annotations

import argparse
import sys

from meltemi.trainer.generate.flags import add_checkpoint_flag, add_sampling_flags, sampling_settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser)
    parser.add_argument("--prompt", required=True, help="the text to continue (required)")
    add_sampling_flags(parser, max_new_tokens=64, temperature=0.8)
    args = parser.parse_args(argv)

    from meltemi.datastore import DatastoreError
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.generate.generation import sample_checkpoint
    from meltemi.trainer.generate.sampling import SamplingConfig

    try:
        settings = SamplingConfig(*sampling_settings(args))
        result, path = sample_checkpoint(
            args.checkpoint, [args.prompt], settings, warn=lambda m: print(m, file=sys.stderr)
        )
    except (TrainerError, DatastoreError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(result.completions[0].text)
    print(f"{path}: {result.tokens_per_second:.1f} tokens/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
