"""Export a checkpoint to a Hugging Face Llama directory (transformers, vLLM, lm-eval read it).

    uv run apps/export_hf.py --checkpoint runs/tiny --out exported/tiny [--dtype bfloat16]

``--checkpoint`` is a run directory (its latest good checkpoint) or a ``step-N`` directory; the tokenizer
files come from the run's own copy, and generation stops at the end-of-text token the checkpoint records.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a run directory or a step-N directory")
    parser.add_argument("--out", required=True, help="the Hugging Face directory to write (new or empty)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)

    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.hf import HfFormatError, export_hf
    from meltemi.trainer.trained_model import load_model

    try:
        trained = load_model(args.checkpoint, warn=lambda m: print(m, file=sys.stderr))
        out = export_hf(
            trained.model,
            args.out,
            tokenizer=trained.tokenizer,
            dtype=args.dtype,
            eos_token=trained.end_of_text.token,
        )
    except (TrainerError, HfFormatError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {trained.checkpoint} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
