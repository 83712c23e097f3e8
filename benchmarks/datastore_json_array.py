"""Peak memory of reading a chat data set kept as one JSON array (as ShareGPT's and Alpaca's are), streamed
record by record (`json_array`), against parsing the file whole (what the datastore did before).

The array holds the standard library's chat corpus (`stdlib_chat`) repeated to the size asked for, each
conversation in ShareGPT's layout. Each side runs in a fresh process that reports its own peak resident
memory: the datastore's read of the file (`conversations.read_conversations`, every conversation checked),
the stream's parsing alone (`json_array.array_items`), and the reference, `json.loads` of the file's text.
All must find the same number of conversations.

    uv run python benchmarks/datastore_json_array.py [--megabytes 200]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def streamed(path: str) -> None:
    from meltemi.datastore.build.inputs.files import describe_source
    from meltemi.datastore.build.inputs.sources import ReadNotes, ReadPolicy
    from meltemi.datastore.chat.conversations import read_conversations

    start = time.perf_counter()
    piece = describe_source(path).pieces()[0]
    count = sum(1 for _ in read_conversations(piece, ReadPolicy(), ReadNotes()))
    seconds = time.perf_counter() - start
    print(json.dumps({"peak_mb": peak_mb(), "seconds": seconds, "conversations": count}))


def parsed(path: str) -> None:
    from meltemi.datastore.build.inputs.json_array import array_items, text_chunks

    start = time.perf_counter()
    with open(path, "rb") as f:
        count = sum(1 for _ in array_items(text_chunks(f), path))
    seconds = time.perf_counter() - start
    print(json.dumps({"peak_mb": peak_mb(), "seconds": seconds, "conversations": count}))


def whole(path: str) -> None:
    start = time.perf_counter()
    records = json.loads(Path(path).read_bytes().decode("utf-8"))
    seconds = time.perf_counter() - start
    print(json.dumps({"peak_mb": peak_mb(), "seconds": seconds, "conversations": len(records)}))


def measure(side: str, path: Path) -> dict:
    command = [sys.executable, __file__, "--side", side, str(path)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def sharegpt(message: dict) -> dict:
    """A message as a ShareGPT turn."""
    return {"from": {"user": "human", "assistant": "gpt"}.get(message["role"], message["role"]),
            "value": message["content"]}  # fmt: skip


def main(megabytes: float) -> None:
    from meltemi.datastore.chat.stdlib import stdlib_chat

    root = Path(tempfile.mkdtemp())
    stdlib_chat(root / "chat.jsonl")
    lines = (root / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    records = [{"conversations": [sharegpt(m) for m in json.loads(line)["messages"]]} for line in lines]
    one = json.dumps(records, indent=2, ensure_ascii=False)
    copies = max(1, round(megabytes * 1e6 / len(one.encode())))
    path = root / "sharegpt.json"
    with path.open("w", encoding="utf-8") as f:
        f.write("[\n")
        for copy in range(copies):
            f.write(("," if copy else "") + one[1:-1])  # the array's items, copy after copy
        f.write("]\n")
    print(f"array: {copies * len(records):,} conversations, {path.stat().st_size / 1e6:,.0f} MB")
    read, stream, reference = (measure(side, path) for side in ("streamed", "parsed", "whole"))
    counts = {read["conversations"], stream["conversations"], reference["conversations"]}
    assert len(counts) == 1, (read, stream, reference)
    for label, side in (("read, every conversation checked", read), ("streamed parse alone", stream),
                        ("json.loads of the whole file", reference)):  # fmt: skip
        print(f"{label + ':':<34} peak {side['peak_mb']:,.0f} MB, {side['seconds']:.1f} s")
    print(f"ratio (peak memory, read / whole): {read['peak_mb'] / reference['peak_mb']:.2f}")
    print(f"ratio (seconds, streamed parse / json.loads): {stream['seconds'] / reference['seconds']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=200.0, help="the array's size, in MB")
    parser.add_argument("--side", choices=("streamed", "parsed", "whole"), help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        {"streamed": streamed, "parsed": parsed, "whole": whole}[args.side](*args.paths)
    else:
        main(args.megabytes)
