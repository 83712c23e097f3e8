"""The evaluation's dry run: the scoring program of ``config``'s model compiled from shapes on the target's
(fake) devices, at its largest (every row ``max_length`` tokens, every position scored: a rolling
log-likelihood window), its memory per device against the chip's. JAX only: no harness needed.

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2,
...                           "max_seq_len": 32}, data={"seq_len": 32}, hardware={"chip": "TPU v5e"})
>>> plan = plan_scoring(config, jax.devices()[:1], batch_size=4)
>>> plan.programs[0].shape, plan.fits
('4 rows x 32 tokens, all 32 scored', True)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp

import haliax_lite as hax
from meltemi.trainer.config import RunConfig
from meltemi.trainer.harness.errors import EvalError
from meltemi.trainer.harness.scoring import token_scores
from meltemi.trainer.plan.budget import planned_attention
from meltemi.trainer.plan.inference import InferencePlan, compile_program, plan_of, sharded_parameters
from meltemi.trainer.step.mesh import inference_layout


def plan_scoring(
    config: RunConfig, devices: Sequence[jax.Device], *, batch_size: int = 8, max_length: int | None = None
) -> InferencePlan:
    """Compile the scoring program that evaluating ``config``'s model on ``devices`` runs at its largest:
    ``batch_size`` rows (rounded up to the data-parallel devices, as the scorer rounds them) of
    ``max_length`` tokens (default: the model's ``max_seq_len``), each position scored."""
    if batch_size < 1:
        raise EvalError(f"batch_size must be a positive integer, got {batch_size!r}")
    length = max_length or config.model.max_seq_len
    if not 1 <= length <= config.model.max_seq_len:
        raise EvalError(
            f"max_length {length} must be between 1 and model.max_seq_len ({config.model.max_seq_len})"
        )
    layout = inference_layout(config, devices)
    plan = layout.plan
    rows = plan.whole_rows(batch_size)
    sharding = plan.sharding((hax.Axis("batch", rows), hax.Axis("columns", length)), plan.compute_mapping)
    tokens = jax.ShapeDtypeStruct((rows, length), jnp.int32, sharding=sharding)
    score = functools.partial(token_scores, compute_dtype=config.trainer.compute_dtype)
    model = sharded_parameters(planned_attention(config, plan.mesh), layout)
    program, _ = compile_program(
        "scoring", f"{rows} rows x {length} tokens, all {length} scored", score, layout, model, *[tokens] * 4
    )
    return plan_of("evaluation", config, layout, model, [program])
