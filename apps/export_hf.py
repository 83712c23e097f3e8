"""Export a checkpoint to a Hugging Face Llama directory (transformers and lm-eval's hf model read it).

    uv run apps/export_hf.py --checkpoint runs/tiny --out exported/tiny [--dtype bfloat16]

``--checkpoint`` is a run directory (its latest good checkpoint) or a ``step-N`` directory, local or in a
bucket (``s3://``, ``gs://``); the tokenizer files come from the run's own copy, and generation stops at the
end-of-text token the checkpoint records. ``--out`` may be a bucket URL too: the export is written in a
local scratch directory, then each file is uploaded (one atomic PUT each, ``config.json`` last).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from meltemi.trainer.generate.flags import add_checkpoint_flag


def _empty_bucket_prefix(target):
    """The bucket prefix to export to, checked writable and empty before any work."""
    from meltemi.datastore.storage import Directory, check_writable
    from meltemi.trainer.hf import HfFormatError

    bucket = Directory(check_writable(target))
    if bucket.list():
        raise HfFormatError(f"{target}: already holds objects; choose another")
    return bucket


def _upload(local: Path, bucket) -> None:
    """Every file of the local export, uploaded to the bucket prefix; ``config.json`` last, so a reader that
    finds it finds the whole export."""
    files = sorted((p for p in local.rglob("*") if p.is_file()), key=lambda p: p.name == "config.json")
    for path in files:
        bucket.write_bytes(path.relative_to(local).as_posix(), path.read_bytes())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_checkpoint_flag(parser)
    parser.add_argument(
        "--out", required=True, help="the Hugging Face directory or URL to write, new or empty (required)"
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16"],
        help="the weights' dtype (default float32)",
    )
    args = parser.parse_args(argv)

    from meltemi.datastore import DatastoreError
    from meltemi.datastore.storage import Location
    from meltemi.trainer.checkpoint.trained_model import load_model
    from meltemi.trainer.errors import TrainerError
    from meltemi.trainer.hf import HfFormatError, export_hf

    try:
        target = Location.parse(args.out)
        if not target.is_local:
            bucket = _empty_bucket_prefix(target)
        trained = load_model(args.checkpoint, warn=lambda m: print(m, file=sys.stderr))

        def export(out):
            return export_hf(
                trained.model,
                out,
                tokenizer=trained.tokenizer,
                dtype=args.dtype,
                eos_token=trained.end_of_text.token,
                stop_ids=trained.end_of_text.stop_ids,
                chat=trained.chat,
            )

        if target.is_local:
            out = export(args.out)
        else:
            with tempfile.TemporaryDirectory(prefix="meltemi-export-") as scratch:
                _upload(export(Path(scratch) / "hf"), bucket)
            out = args.out
    except (TrainerError, HfFormatError, DatastoreError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {trained.checkpoint} to {out}")
    return 0


if __name__ == "__main__":
    from meltemi.trainer.cli import exit_process

    exit_process(main(sys.argv[1:]))
