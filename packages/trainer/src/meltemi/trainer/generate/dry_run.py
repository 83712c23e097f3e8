"""Sampling's dry run: the prefill and decode programs of ``config``'s model compiled from shapes on the
target's (fake) devices, at their largest (the longest prompt the context leaves room for, then
``max_new_tokens`` decoded with the KV cache), their memory per device against the chip's.

>>> import jax
>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig(model={"vocab_size": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 2,
...                           "max_seq_len": 32}, data={"seq_len": 32}, hardware={"chip": "TPU v5e"})
>>> plan = plan_sampling(config, jax.devices()[:1], max_new_tokens=8)
>>> [(p.name, p.shape) for p in plan.programs]
[('prefill', '1 rows x 24 prompt tokens'), ('decode', '1 rows, a cache of 32 tokens, 32 steps a call')]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp

import haliax_lite as hax
from meltemi.trainer.config import RunConfig
from meltemi.trainer.generate.generation import CHUNK, decode_chunk, prefill
from meltemi.trainer.generate.sampling import Drawing, GenerationError, SamplingConfig
from meltemi.trainer.plan.budget import planned_attention
from meltemi.trainer.plan.inference import InferencePlan, compile_program, plan_of, sharded_parameters
from meltemi.trainer.step.mesh import inference_layout


def plan_sampling(
    config: RunConfig, devices: Sequence[jax.Device], *, max_new_tokens: int = 64, rows: int = 1
) -> InferencePlan:
    """Compile the programs that sampling ``max_new_tokens`` for ``rows`` prompts (rounded up to the
    data-parallel devices, as ``generate`` rounds them) runs on ``devices``: the prefill of the longest
    prompt the model's context leaves room for, and the decode loop over the whole cache."""
    end = config.model.max_seq_len
    if not 1 <= max_new_tokens < end:
        raise GenerationError(
            f"max_new_tokens {max_new_tokens} must be between 1 and model.max_seq_len - 1 ({end - 1})"
        )
    layout = inference_layout(config, devices)
    plan = layout.plan
    rows = plan.whole_rows(rows)
    prompt_len = end - max_new_tokens

    def batch(*shape: int, dtype=jnp.int32) -> jax.ShapeDtypeStruct:
        axes = (hax.Axis("batch", rows), *(hax.Axis("columns", n) for n in shape[1:]))
        return jax.ShapeDtypeStruct(shape, dtype, sharding=plan.sharding(axes, plan.compute_mapping))

    model = sharded_parameters(planned_attention(config, plan.mesh), layout)
    first, compiled = compile_program(
        "prefill",
        f"{rows} rows x {prompt_len} prompt tokens",
        functools.partial(prefill, prompt_len=prompt_len, use_cache=True),
        layout,
        model,
        batch(rows, end),
        batch(rows),
        batch(rows, dtype=jnp.bool_),
    )
    loop = jax.tree.map(
        lambda info, sharding: jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding),
        compiled.out_info,
        compiled.output_shardings,
    )
    settings = SamplingConfig(max_new_tokens=max_new_tokens)
    decode, _ = compile_program(
        "decode",
        f"{rows} rows, a cache of {end} tokens, {CHUNK} steps a call",
        functools.partial(decode_chunk, drawing=Drawing.of(settings), eos=(0,), chunk=CHUNK),
        layout,
        model,
        loop,
        jax.ShapeDtypeStruct((), jnp.int32),  # the seed of the draws
        donate_argnums=(1,),
    )
    return plan_of("sampling", config, layout, model, [first, decode])
