"""Tokens/s of KV-cache decoding against recomputing the full forward pass for every token (same model,
same prompts, same greedy tokens, one process).

Both run `meltemi.trainer.generate.generation.generate`: with the cache (prefill, then one token per
step) and with `use_cache=False` (the training forward pass over the whole buffer each token).
Compilation is excluded (a warm-up call each); then the two alternate for `--rounds` rounds and the
medians are compared. The last line is `ratio: <cached tokens/s / recompute tokens/s>`.

    uv run python benchmarks/generation.py                 # configs/tiny.yaml's model, on this machine
    uv run python benchmarks/generation.py --new-tokens 256 --batch 8   # the gap grows with length
"""

from __future__ import annotations

import argparse
import statistics

import jax
import numpy as np

from meltemi.trainer.config_io import load_config
from meltemi.trainer.generate.generation import generate
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.model.llama import Llama


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tiny.yaml", help="the model section is used")
    parser.add_argument("--batch", type=int, default=4, help="prompts decoded together")
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two decoders")
    args = parser.parse_args()

    config = load_config(args.config, []).model
    model = Llama.init(config, key=jax.random.key(0))
    prompts = (
        np.random.default_rng(0).integers(0, config.vocab_size, (args.batch, args.prompt_tokens)).tolist()
    )
    settings = SamplingConfig(max_new_tokens=args.new_tokens)

    def run(use_cache: bool):
        return generate(model, prompts, settings, use_cache=use_cache, chunk=args.new_tokens)

    cached, recomputed = run(True), run(False)  # warm-up: compiles each once
    same = [c.tokens for c in cached.completions] == [c.tokens for c in recomputed.completions]
    rates: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for use_cache in (True, False):
            rates[use_cache].append(run(use_cache).tokens_per_second)
    fast, slow = statistics.median(rates[True]), statistics.median(rates[False])
    print(
        f"device: {jax.devices()[0].device_kind}; model {args.config} "
        f"({config.num_layers} layers, embed {config.hidden_dim}, vocab {config.vocab_size}); "
        f"batch {args.batch} x prompt {args.prompt_tokens} + {args.new_tokens} new tokens"
    )
    print(f"greedy tokens identical: {same}")
    print(f"KV cache:          {fast:,.0f} tokens/s (rounds: {', '.join(f'{r:,.0f}' for r in rates[True])})")
    print(f"full recompute:    {slow:,.0f} tokens/s (rounds: {', '.join(f'{r:,.0f}' for r in rates[False])})")
    print(f"ratio: {fast / slow:.2f}")


if __name__ == "__main__":
    main()
