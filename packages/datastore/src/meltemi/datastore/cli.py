"""The command line: `python -m meltemi.datastore build|info|verify`.

A user error (a bad input, a damaged or half-built store) prints one line, `error: ...`, and exits 1.
"""

import argparse
import json
import sys
from collections.abc import Sequence

from meltemi.datastore.audit import audit_store
from meltemi.datastore.build import UNIT_BYTES, build_store
from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.layout import DEFAULT_CHUNK_TOKENS, DEFAULT_SHARD_TOKENS
from meltemi.datastore.store import TokenStore


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m meltemi.datastore",
        description="Build a deterministic token store from text, JSONL or Parquet, inspect it, verify it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="tokenize text, JSONL or Parquet into a token store")
    build.add_argument("--input", nargs="+", required=True, metavar="PATH_OR_GLOB_OR_URL")
    build.add_argument("--tokenizer", required=True, metavar="TOKENIZER_JSON")
    build.add_argument("--out", required=True, metavar="DIR")
    build.add_argument("--text-field", default="text", help="JSONL field / Parquet column holding the text")
    build.add_argument("--workers", type=int, default=1, help="tokenizer processes (the result is the same)")
    build.add_argument(
        "--eos", action=argparse.BooleanOptionalAction, default=True, help="EOS after each document"
    )
    build.add_argument(
        "--eos-token", default=None, help="the EOS token's text (default: found in the tokenizer)"
    )
    build.add_argument("--overwrite", action="store_true", help="rebuild even if the inputs changed")
    build.add_argument(
        "--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS, help="tokens per checksummed chunk"
    )
    build.add_argument(
        "--shard-tokens",
        type=int,
        default=None,
        help=f"tokens per shard file, a multiple of --chunk-tokens (default: about {DEFAULT_SHARD_TOKENS:,})",
    )
    build.add_argument("--unit-bytes", type=int, default=UNIT_BYTES, help="input bytes per unit of work")
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
            report = build_store(
                args.input,
                args.tokenizer,
                args.out,
                text_field=args.text_field,
                workers=args.workers,
                eos=args.eos,
                eos_token=args.eos_token,
                overwrite=args.overwrite,
                chunk_tokens=args.chunk_tokens,
                shard_tokens=args.shard_tokens,
                unit_bytes=args.unit_bytes,
            )
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
