"""Requests per second of the harness's ``loglikelihood``: the ``meltemi`` model (JAX) against the harness's
own ``hf`` model on the exported checkpoint in transformers (PyTorch), same CPU, same requests, same batch.

The model is ``--config``'s (default ``configs/tiny.yaml``, about 2.9M parameters), initialised at random and
exported with a BPE of its vocabulary size trained on a few standard-library files. The requests are
multiple-choice-like token requests (a context of 32 to 200 tokens, a continuation of 1 to 8), handed to
both models' ``_loglikelihood_tokens`` (tokenizing is the same code in both and left out). Each model scores
them once to compile or warm up; then the two alternate for ``--rounds`` rounds and the medians are
compared. The last line is ``ratio: <meltemi requests/s / hf requests/s>`` (goal: at least 1.0).

    uv run --group eval --group torch python benchmarks/eval_loglikelihood.py [--requests 256] [--batch 16]

Needs the ``eval`` group and the ``torch`` group (torch and accelerate; see pyproject.toml).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax
import numpy as np
import torch
from lm_eval.models.huggingface import HFLM

from meltemi.datastore import corpora
from meltemi.trainer.config_io import load_config
from meltemi.trainer.harness.model import MeltemiLM
from meltemi.trainer.hf import export_hf
from meltemi.trainer.model.llama import Llama


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml", help="the model section is used")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16, help="rows per forward pass, both models")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    config = load_config(args.config, ["--data.tokenizer", "unused.json"])
    work = Path(tempfile.mkdtemp(prefix="eval-bench-"))
    files = corpora.python_stdlib()[:40]
    tokenizer = corpora.train_tokenizer(files, config.model.vocab_size, work / "tokenizer.json")
    model = Llama.init(config.model, key=jax.random.key(0))
    hf_dir = export_hf(model, work / "hf", tokenizer=tokenizer)

    rng = np.random.default_rng(0)
    vocab = config.model.vocab_size
    requests = [
        (("", ""), rng.integers(0, vocab, rng.integers(32, 201)).tolist(), rng.integers(0, vocab, rng.integers(1, 9)).tolist())  # noqa: E501
        for _ in range(args.requests)
    ]  # fmt: skip
    compute = config.trainer.compute_dtype
    ours = MeltemiLM(model=model, tokenizer=tokenizer, batch_size=args.batch, compute_dtype=compute)
    theirs = HFLM(pretrained=str(hf_dir), device="cpu", batch_size=args.batch, dtype=compute)

    def rate(lm) -> tuple[float, list[float]]:
        start = time.perf_counter()
        scores = lm._loglikelihood_tokens(requests, disable_tqdm=True)
        return len(requests) / (time.perf_counter() - start), [s for s, _ in scores]

    _, first = rate(ours)  # warm-up: compiles the few length buckets
    _, reference = rate(theirs)
    rates: dict[str, list[float]] = {"meltemi": [], "hf": []}
    for _ in range(args.rounds):
        rates["meltemi"].append(rate(ours)[0])
        rates["hf"].append(rate(theirs)[0])
    fast, slow = statistics.median(rates["meltemi"]), statistics.median(rates["hf"])
    print(
        f"device: {jax.devices()[0].device_kind} ({os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}); model {args.config} ({config.model.num_layers} layers, embed "
        f"{config.model.hidden_dim}, vocab {vocab}, {compute}); {args.requests} requests, batch {args.batch}"
    )
    print(f"largest difference in log-likelihood: {np.max(np.abs(np.subtract(first, reference))):.2e}")
    for name, median in (("meltemi (JAX)", fast), ("hf (transformers)", slow)):
        rounds = ", ".join(f"{r:,.1f}" for r in rates[name.split()[0]])
        print(f"{name + ':':<21}{median:,.1f} requests/s (rounds: {rounds})")
    print(f"ratio: {fast / slow:.2f}")


if __name__ == "__main__":
    main()
