"""Model FLOPs per token, and the peak FLOP/s of the device a run is on, for MFU.

Following MaxText's convention, a token costs ``6 N`` FLOPs for its matmuls forward and backward (``N``: the
parameters that multiply activations, the unembedding included, the embedding lookup and norm scales not)
plus causal attention, ``6 * seq_len * num_heads * head_dim * num_layers`` (half of the full square).

>>> from meltemi.trainer.config import ModelConfig
>>> config = ModelConfig(vocab_size=128256, hidden_dim=4096, intermediate_dim=14336, num_layers=32,
...                      num_heads=32, num_kv_heads=8)
>>> round(flops_per_token(config, seq_len=4096) / 1e9, 1)
48.2
"""

from __future__ import annotations

import jax

from meltemi.trainer.chips import chip_of_device_kind
from meltemi.trainer.config import ModelConfig


def matmul_parameters(config: ModelConfig) -> int:
    """Parameters that take part in matmuls: every projection and the unembedding."""
    d, heads, kv, hd = config.hidden_dim, config.num_heads, config.num_kv_heads, config.head_size
    attention = d * heads * hd * 2 + d * kv * hd * 2
    mlp = 3 * d * config.intermediate_dim
    return config.num_layers * (attention + mlp) + d * config.vocab_size


def flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward and backward) per token at this sequence length."""
    attention = 6 * seq_len * config.num_heads * config.head_size * config.num_layers
    return 6 * matmul_parameters(config) + attention


def peak_flops_per_device(device: jax.Device | None = None) -> float | None:
    """The device's dense bf16 peak (:mod:`meltemi.trainer.chips`), or None when the chip is not listed
    (CPUs: report achieved FLOP/s instead of MFU)."""
    chip = chip_of_device_kind(getattr(device or jax.devices()[0], "device_kind", ""))
    return None if chip is None else chip.peak_bf16_flops
