"""Pretrain a Llama: by default the tiny config on the Python standard library, on this machine's CPU.

    uv run apps/pretrain.py                                     # first run builds the corpus; reruns resume
    uv run apps/pretrain.py --trainer.num_train_steps 200       # any config field, by its dotted name
    uv run apps/pretrain.py --data.stores STORE [STORE ...]     # your own token stores
    uv run apps/pretrain.py --data.corpus FILE_OR_DIR           # text/JSONL/Parquet, tokenized on first use
    uv run apps/pretrain.py --config configs/marin_8b.yaml --dry-run [--devices N] [--mfu 0.5]
    uv run apps/pretrain.py --launch ray --slices 2 [--slice-type TYPE] [--address ADDR] [--min-slices M]
    uv run apps/pretrain.py --verify runs/tiny                  # recompute every checkpoint's digests

This is ``python -m meltemi.trainer`` with ``configs/tiny.yaml`` as its default config: the same flags,
the same summary. Progress and logs go to stderr; the summary goes to stdout. ``--help`` lists every flag
and field.
"""

import sys
from pathlib import Path

from meltemi.trainer.cli import exit_process, main

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml"

if __name__ == "__main__":
    exit_process(main(sys.argv[1:], prog="uv run apps/pretrain.py", default_config=DEFAULT_CONFIG))
