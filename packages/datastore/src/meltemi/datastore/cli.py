"""The command line: `python -m meltemi.datastore build|info|verify`.

A user error (a bad input, a damaged or half-built store) prints one line, `error: ...`, and exits 1.
"""

import argparse
import json
import sys
from collections.abc import Sequence

from meltemi.datastore.audit import audit_store
from meltemi.datastore.build import build_store
from meltemi.datastore.build.request import BUILD_FLAGS
from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.store import TokenStore


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m meltemi.datastore",
        description="Build a deterministic token store from text, JSONL, Parquet or Arrow; inspect it, "
        "verify it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="tokenize text, JSONL, Parquet or Arrow into a token store")
    for flag in BUILD_FLAGS:
        flag.add_to(build)
    info = commands.add_parser("info", help="print a store's counts, tokenizer, layout and content hash")
    info.add_argument("store", metavar="DIR_OR_URL")
    verify = commands.add_parser(
        "verify", help="read the whole store, checking every chunk's checksum and the manifest's hashes"
    )
    verify.add_argument("store", metavar="DIR_OR_URL")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "build":
            report = build_store(**{flag.field: getattr(args, flag.field) for flag in BUILD_FLAGS})
            print(report.summary())
        elif args.command == "info":
            store = TokenStore.open(args.store)
            fields = ("counts", "tokenizer", "tokens", "content_sha256")
            print(json.dumps({"path": store.path} | {k: store.manifest[k] for k in fields}, indent=1))
        else:
            store = TokenStore.open(args.store)
            audit_store(store)
            print(f"{store.path}: all {store.num_tokens:,} tokens and {store.num_docs:,} documents check out")
    except (DatastoreError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0
