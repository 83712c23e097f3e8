"""Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p.

The filters follow Hugging Face's order (temperature, then top-k, then top-p) and keep ties at the
cut-off; temperature 0 is greedy (the first of equal maxima, as ``argmax``).

>>> import jax, jax.numpy as jnp
>>> logits = jnp.array([[0.0, 2.0, 1.0]])
>>> next_tokens(logits, jax.random.key(0), SamplingConfig()).tolist()
[1]
>>> next_tokens(logits, jax.random.key(0), SamplingConfig(temperature=1.0, top_k=1)).tolist()
[1]
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from meltemi.trainer.errors import TrainerError


class GenerationError(TrainerError):
    """A generation request that cannot run: bad sampling settings, prompts or lengths (named)."""


class ConversationTooLongError(GenerationError):
    """A chat's prompt that, with the new tokens asked for, does not fit the model's positions."""


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How to generate: how many new tokens at most, how to choose each, and when to stop early.

    ``temperature`` 0 is greedy; ``top_k`` keeps the k most likely tokens, ``top_p`` the fewest whose
    probability reaches p; ``seed`` fixes the draws; ``stop_strings`` end a row once its text holds one.
    """

    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise GenerationError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise GenerationError(f"temperature must be >= 0 (0: greedy), got {self.temperature!r}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise GenerationError(f"top_k must be a positive integer or None, got {self.top_k!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p must be in (0, 1] or None, got {self.top_p!r}")
        if isinstance(self.stop_strings, str) or any(not s for s in self.stop_strings):
            raise GenerationError(
                f"stop_strings must be a tuple of non-empty strings, got {self.stop_strings!r}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Drawing(eqx.Module):
    """What choosing a token takes of a ``SamplingConfig``, as a compiled program takes it: the switches
    that change the program (greedy or not, whether top-p filters, top-k's bucket: the power of two at or
    above k) are static; the temperature, top-p and top-k's k are arrays, so another value of any of them
    runs the same program (another k in the same bucket too).

    >>> drawing = Drawing.of(SamplingConfig(temperature=0.7, top_k=40, top_p=0.9))
    >>> drawing.filters_top_p, drawing.top_k_bucket, int(drawing.top_k)
    (True, 64, 40)
    """

    temperature: jax.Array
    top_p: jax.Array
    top_k: jax.Array
    greedy: bool = eqx.field(static=True)
    top_k_bucket: int | None = eqx.field(static=True)
    filters_top_p: bool = eqx.field(static=True)

    @classmethod
    def of(cls, config: SamplingConfig) -> Drawing:
        filters_top_p = config.top_p is not None and config.top_p < 1
        return cls(
            temperature=jnp.float32(1.0 if config.greedy else config.temperature),
            top_p=jnp.float32(config.top_p if filters_top_p else 1.0),
            top_k=jnp.int32(config.top_k or 0),
            greedy=config.greedy,
            top_k_bucket=None if config.top_k is None else 1 << (config.top_k - 1).bit_length(),
            filters_top_p=filters_top_p,
        )


def filter_logits(logits: jax.Array, config: SamplingConfig | Drawing) -> jax.Array:
    """``logits`` (rows, vocab) scaled by the temperature, with what top-k and top-p drop set to -inf.

    Top-k compares the logits before scaling: dividing can round two distinct logits to one value (or
    flush a tiny one to zero), which would keep a token ranked below the k-th.
    """
    drawing = config if isinstance(config, Drawing) else Drawing.of(config)
    logits = logits.astype(jnp.float32)
    if drawing.top_k_bucket is not None:  # the bucket's largest, then the k-th of them (k past it: all kept)
        largest = jax.lax.top_k(logits, min(drawing.top_k_bucket, logits.shape[-1]))[0]
        kth = jnp.take(largest, jnp.minimum(drawing.top_k, largest.shape[-1]) - 1, axis=-1)[..., None]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    logits = logits / drawing.temperature
    if drawing.filters_top_p:
        ordered = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # probability of the more likely tokens
        cutoff = jnp.min(jnp.where(before < drawing.top_p, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return logits


def next_tokens(logits: jax.Array, key: jax.Array, config: SamplingConfig | Drawing) -> jax.Array:
    """The next token of each row of ``logits`` (rows, vocab): argmax when greedy, else a draw."""
    if config.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return jax.random.categorical(key, filter_logits(logits, config), axis=-1).astype(jnp.int32)
