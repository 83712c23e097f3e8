"""Export a checkpoint to a Hugging Face Llama directory (transformers and lm-eval's hf model read it).

    uv run apps/export_hf.py [--checkpoint RUN] [--out exported/tiny] [--dtype bfloat16]

``--checkpoint`` is a run directory (its latest good checkpoint), a ``step-N`` directory or a Hugging Face
directory (to convert it: ``--dtype bfloat16``, or into a bucket), local or in a bucket (``s3://``,
``gs://``), by default ``runs/tiny`` (``uv run apps/pretrain.py``'s); the tokenizer files come from the run's
own copy, and generation stops at the end-of-text token the checkpoint records. A run that kept a moving
average of its weights (``optimizer.ema``) is exported as the average, unless ``--weights raw``. ``--out``
is by default ``exported/`` and the checkpoint's name (``exported/tiny``; ``exported/tiny-step-200`` for a
run's step); it may be a bucket URL too: the export goes straight there, shard by shard (one atomic PUT
each, ``config.json`` last), with no local copy.
"""

from __future__ import annotations

import argparse
import sys

from meltemi.trainer.generate.flags import PRETRAINED, add_checkpoint_flag, checkpoint_of, refuse_unknown


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser, PRETRAINED)
    parser.add_argument(
        "--out",
        help="the Hugging Face directory or URL to write, new or empty (default: exported/ and the "
        "checkpoint's name, e.g. exported/tiny)",
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="the weights' dtype (default float32)",
    )
    args, unknown = parser.parse_known_args(argv)
    refuse_unknown(parser, unknown)
    checkpoint = checkpoint_of(parser, args, check=False)  # the target is checked first, below

    from meltemi.datastore import DatastoreError
    from meltemi.trainer.checkpoint.trained_model import default_export_dir, load_model
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.hf import HfFormatError, export_hf, export_target

    out = args.out or default_export_dir(checkpoint)
    try:
        try:
            export_target(out)  # a bad, missing or non-empty target: one line, before the checkpoint is read
        except HfFormatError as e:
            if args.out is not None:
                raise
            raise HfFormatError(f"{e} with --out") from None  # the user named no target: say how to
        trained = load_model(checkpoint, warn=lambda m: print(m, file=sys.stderr), weights=args.weights)
        export_hf(
            trained.model,
            out,
            tokenizer=trained.tokenizer,
            dtype=args.dtype,
            eos_token=trained.end_of_text.token,
            stop_ids=trained.end_of_text.stop_ids,
            chat=trained.chat,
        )
    except (TrainerError, HfFormatError, DatastoreError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    which = " (its EMA weights)" if trained.weights == "ema" else ""
    print(f"exported {trained.checkpoint}{which} to {out}")
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
