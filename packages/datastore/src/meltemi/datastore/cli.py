"""The command line: `python -m meltemi.datastore build|info|verify`.

A user error (a bad input, a damaged or half-built store) prints one line, `error: ...`, and exits 1.
"""

import argparse
import json
import sys
from collections.abc import Sequence

from meltemi.datastore.audit import audit_store
from meltemi.datastore.build import build_store
from meltemi.datastore.build.dry_run import BYTES_PER_TOKEN, MEASURED_RATE, plan_build
from meltemi.datastore.build.request import BUILD_FLAGS, BuildRequest
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
    planning = build.add_argument_group(
        "planning (--dry-run: nothing is read but the listing, nothing written)"
    )
    planning.add_argument(
        "--dry-run", action="store_true", help="print the units, workers, objects, memory and time, and stop"
    )
    planning.add_argument(
        "--nodes", type=int, metavar="N", help="plan for N nodes (default: --ray's, or this host)"
    )
    planning.add_argument("--cores-per-node", type=int, metavar="C", help="plan for C workers per node")
    planning.add_argument(
        "--rate",
        type=float,
        default=MEASURED_RATE,
        metavar="TOKENS_PER_S",
        help=f"tokens/s per worker (default {MEASURED_RATE:,.0f}, measured: benchmarks/RESULTS.md)",
    )
    planning.add_argument(
        "--bytes-per-token", type=float, default=BYTES_PER_TOKEN, metavar="B", help="input bytes per token"
    )
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
        if args.command == "build" and args.dry_run:
            keywords = {flag.field: getattr(args, flag.field) for flag in BUILD_FLAGS}
            request = BuildRequest(**{k: tuple(v) if k == "inputs" else v for k, v in keywords.items()})
            for line in plan_build(
                request,
                nodes=args.nodes,
                cores_per_node=args.cores_per_node,
                rate=args.rate,
                bytes_per_token=args.bytes_per_token,
            ):
                print(line)
        elif args.command == "build":
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
    except KeyboardInterrupt as stop:  # a build's says what it kept (build.interrupt.BuildInterrupted)
        print(str(stop) or "interrupted", file=sys.stderr)
        return 130
    return 0
