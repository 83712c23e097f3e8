"""Chat store build throughput against a text store build of the same conversations, in the same run.

The chat build reads JSON Lines of conversations, renders each with the chat template (Jinja), tokenizes the
rendered text and weighs every token from the generation blocks' spans; the reference builds a text store of
the same rendered strings (one JSON line each), so both tokenize the same characters and the ratio is what
rendering and weighing cost. Corpus: the standard library's chat data set (`stdlib_chat`), repeated.

    uv run python benchmarks/datastore_chat_build.py [--copies 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from meltemi.datastore import build_store, corpora
from meltemi.datastore.chat.stdlib import stdlib_chat
from meltemi.datastore.chat.template import ChatTemplate


def main(copies: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp())
    tokenizer = corpora.train_tokenizer(corpora.python_stdlib()[:200], 8192, root / "tokenizer.json")
    conversations = Path(stdlib_chat(root / "one.jsonl")).read_text(encoding="utf-8").splitlines()
    chat = root / "chat.jsonl"
    chat.write_text("\n".join(conversations * copies) + "\n", encoding="utf-8")
    template = ChatTemplate.llama3()
    rendered = [template.render(json.loads(line)["messages"]).text for line in conversations]
    text = root / "text.jsonl"
    lines = [json.dumps({"text": r}, ensure_ascii=False) for r in rendered] * copies
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    size = chat.stat().st_size / 1e6
    print(f"corpus: {len(conversations) * copies:,} conversations, {size:.1f} MB as chat")
    best = {"chat": float("inf"), "text": float("inf")}
    tokens = {}
    for run in range(rounds):
        for kind, path, options in (("chat", chat, {"format": "chat"}), ("text", text, {"eos": False})):
            start = time.perf_counter()
            report = build_store(path, tokenizer, root / f"{kind}-{run}", progress=False, **options)
            best[kind] = min(best[kind], time.perf_counter() - start)
            tokens[kind] = report.tokens
    assert tokens["chat"] == tokens["text"], tokens  # the same rendered strings, the same tokens
    rate = {kind: tokens[kind] / best[kind] for kind in best}
    print(f"chat store: {rate['chat']:,.0f} tokens/s ({best['chat']:.2f} s)")
    print(f"text store: {rate['text']:,.0f} tokens/s ({best['text']:.2f} s)")
    print(f"ratio: {rate['chat'] / rate['text']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="times the data set is repeated")
    parser.add_argument("--rounds", type=int, default=3, help="builds of each kind; the fastest counts")
    args = parser.parse_args()
    main(args.copies, args.rounds)
