"""Build the token stores a run config's sources name by their raw inputs, before training on them.

    uv run apps/build_stores.py --config configs/marin_8b.yaml --dry-run     # what would be built, and where
    uv run apps/build_stores.py --config configs/marin_8b.yaml               # build what is missing, here
    uv run apps/build_stores.py --config configs/marin_8b.yaml --ray HEAD:6379  # on a Ray cluster

Each source of ``data.sources`` with ``build_from`` (files, globs, directories or bucket prefixes) is built
at its ``store``, local or in a bucket, with the run's ``data.tokenizer``, unless a finished store is there
already; the sources are built side by side, each build's units in parallel inside it (this machine's
processes, or the Ray cluster's tasks with ``--ray``). One line per source says how its build ended; a
source whose build failed is one line naming it, and the others' stores are kept. Every config field is an
override, as in ``apps/pretrain.py``; ``--help`` lists them. ``apps/pretrain.py --launch ray`` builds the
missing stores itself before training.
"""

import sys

from meltemi.trainer.cli import build_stores, exit_process

if __name__ == "__main__":
    exit_process(build_stores(sys.argv[1:], prog="uv run apps/build_stores.py"))
