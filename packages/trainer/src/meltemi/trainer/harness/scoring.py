"""Scoring token continuations with the JAX model: each request's summed log-probability and whether greedy
decoding would have produced it, in fixed-shape batches so a whole task compiles a few programs, not one per
request.

A request is ``(context ids, continuation ids)``. As in lm-evaluation-harness's Hugging Face model, the
scored row is ``(context + continuation)[-(max_length + 1):]``: its first tokens are the input, each next
one a target, and the last ``len(continuation)`` targets are scored. Rows are sorted longest first, cut into
batches of ``batch_size`` rows (filler rows pad the last one), and each batch is right-padded to a length
bucket (16, 24, 32, 48, 64, 96, ...: at most half again the longest row), or ``max_length`` itself. Padding
sits after the real tokens in its own segment, so under causal attention it changes no score. Only the
scored positions (a power of two of them from 8, enough for the longest continuation) go through the
output layer: a multiple-choice continuation of a few tokens does not pay for the vocabulary at every
position.

>>> import jax
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2,
...                      max_seq_len=64, attention="reference")
>>> scorer = TokenScorer(Llama.init(config, key=jax.random.key(0)), batch_size=2)
>>> scores = scorer.score([([1, 2], [3]), ([4], [5, 6])])
>>> [round(-s.logprob / n) for s, n in zip(scores, [1, 2])]  # at init about log(64) = 4.2 nats a token
[4, 4]
>>> scorer.bucket(20), scorer.bucket(33), scorer.bucket(64)
(24, 48, 64)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import haliax_lite as hax
from meltemi.trainer.harness.errors import EvalError
from meltemi.trainer.model.llama import Llama, cast_floating
from meltemi.trainer.step.mesh import MeshPlan, placed

# How many times the scoring program was traced (compiled), by its shape (rows, positions, scored positions):
# the proof of "a few shapes".
TRACES: Counter[tuple[int, int, int]] = Counter()
SMALLEST_BUCKET = 16
FEWEST_SCORED = 8
PAD_SEGMENT = 1


@dataclasses.dataclass(frozen=True)
class Score:
    """A continuation's summed log-probability (nats) and whether every token was the model's argmax."""

    logprob: float
    greedy: bool


def token_scores(
    model: Llama,
    ids: jax.Array,
    segments: jax.Array,
    positions: jax.Array,
    targets: jax.Array,
    compute_dtype: str,
) -> tuple[jax.Array, jax.Array]:
    """At each row's ``positions``: its target's log-probability and whether it is the argmax (float32).
    The scoring program (``ids`` and ``segments``: rows x positions; ``positions`` and ``targets``: rows x
    scored positions), jitted here and compiled from shapes alone by the evaluation's dry run."""
    TRACES[(*ids.shape, positions.shape[1])] += 1
    compute = cast_floating(model, jnp.dtype(compute_dtype))
    named = hax.named(ids, ("batch", "position"))
    hidden = compute.hidden_states(named, hax.named(segments, ("batch", "position")))
    hidden = hidden.rearrange(("batch", "position", "embed")).array
    scored = jnp.take_along_axis(hidden, positions[..., None], axis=1)
    scored = hax.named(scored, ("batch", "scored", "embed"))
    logits = hax.dot(
        scored, compute.unembedding().astype(scored.dtype), axis="embed", preferred_element_type=jnp.float32
    )
    logits = logits.rearrange(("batch", "scored", "vocab")).array
    chosen = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    logprob = chosen - jax.nn.logsumexp(logits, axis=-1)
    return logprob, jnp.argmax(logits, axis=-1) == targets


_token_scores = eqx.filter_jit(token_scores)


class TokenScorer:
    """Scores requests with ``model`` (laid out by ``plan``'s parameter mapping when one is given), computing
    in ``compute_dtype``, ``batch_size`` rows per call, rows no longer than ``max_length`` input tokens
    (default: the model's ``max_seq_len``)."""

    def __init__(
        self,
        model: Llama,
        *,
        batch_size: int = 8,
        max_length: int | None = None,
        compute_dtype: str = "float32",
        plan: MeshPlan | None = None,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise EvalError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.max_length = max_length or model.config.max_seq_len
        if not 1 <= self.max_length <= model.config.max_seq_len:
            raise EvalError(
                f"max_length {self.max_length} must be between 1 and model.max_seq_len "
                f"({model.config.max_seq_len})"
            )
        self.model, self.compute_dtype, self.plan = model, compute_dtype, plan
        self.rows = batch_size if plan is None else plan.whole_rows(batch_size)

    def bucket(self, length: int) -> int:
        """The padded length of a batch whose longest row has ``length`` input tokens."""
        padded, step = SMALLEST_BUCKET, SMALLEST_BUCKET // 2
        while padded < length:
            padded += step
            step = padded // 2 if padded & (padded - 1) == 0 else step
        return min(padded, self.max_length)

    def _row(self, context: Sequence[int], continuation: Sequence[int]) -> tuple[list[int], int]:
        whole = [*context, *continuation][-(self.max_length + 1) :]
        if len(whole) < 2:
            raise EvalError("a request needs at least two tokens in context and continuation together")
        if not continuation:
            raise EvalError("a request's continuation is empty: there is nothing to score")
        return whole, min(len(continuation), len(whole) - 1)

    def score(
        self,
        requests: Sequence[tuple[Sequence[int], Sequence[int]]],
        advance: Callable[[int], object] | None = None,
    ) -> list[Score]:
        """Each request's ``Score``, in the order given; ``advance`` is told how many after each batch."""
        rows = [self._row(context, continuation) for context, continuation in requests]
        order = sorted(range(len(rows)), key=lambda i: (-len(rows[i][0]), i))
        scores: list[Score | None] = [None] * len(rows)
        for start in range(0, len(order), self.rows):
            chunk = order[start : start + self.rows]
            for i, result in zip(chunk, self._score_batch([rows[i] for i in chunk]), strict=True):
                scores[i] = result
            if advance is not None:
                advance(len(chunk))
        return scores  # type: ignore[return-value]

    def _score_batch(self, rows: list[tuple[list[int], int]]) -> list[Score]:
        length = self.bucket(max(len(whole) - 1 for whole, _ in rows))
        width = FEWEST_SCORED
        while width < max(scored for _, scored in rows):
            width *= 2
        width = min(width, length)
        ids = np.zeros((self.rows, length), np.int32)
        segments = np.full((self.rows, length), PAD_SEGMENT, np.int32)
        positions = np.zeros((self.rows, width), np.int32)
        targets = np.zeros((self.rows, width), np.int32)
        for r, (whole, scored) in enumerate(rows):
            n = len(whole) - 1
            ids[r, :n], segments[r, :n] = whole[:-1], 0
            positions[r, :scored] = np.arange(n - scored, n)
            targets[r, :scored] = whole[n - scored + 1 :]
        with placed(self.plan):
            arrays = [self._put(a) for a in (ids, segments, positions, targets)]
            logprob, greedy = _token_scores(self.model, *arrays, self.compute_dtype)
            logprob, greedy = np.asarray(logprob), np.asarray(greedy)
        results = []
        for r, (_, scored) in enumerate(rows):
            total = float(logprob[r, :scored].astype(np.float64).sum())
            results.append(Score(total, bool(greedy[r, :scored].all())))
        return results

    def _put(self, array: np.ndarray) -> jax.Array:
        if self.plan is None:
            return jnp.asarray(array)
        sharding = self.plan.sharding(
            (hax.Axis("batch", array.shape[0]), hax.Axis("columns", array.shape[1])),
            self.plan.compute_mapping,
        )
        return jax.device_put(array, sharding)
