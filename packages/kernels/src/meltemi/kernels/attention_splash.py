"""JAX's TPU splash-attention kernel behind this package's interface.

Splash works per example on ``[heads, seq, head_dim]`` with the sequence in whole blocks, so the wrapper
transposes, pads the sequence to a multiple of ``SPLASH_BLOCK`` (padded tokens get a padding segment) and
the head dimension to a multiple of 128, and maps over the batch. Splash lets tokens with equal segment
ids see each other whatever the id, so outputs at negative (padding) ids are zeroed afterwards to keep this
package's contract: padding attends to nothing.

JAX's splash modules are imported on first use, not with this package: they take a fifth of a second to
import, which every program that never runs splash (a CPU run, ``--help``) would pay at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from meltemi.kernels._blocking import PADDING_SEGMENT, pad_axis, pad_sequence, round_up
from meltemi.kernels.mask_spec import MaskSpec

if TYPE_CHECKING:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask

SPLASH_BLOCK = 128
LANES = 128


def _mask(spec: MaskSpec, seq: int) -> splash_attention_mask.Mask:
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as splash_mask

    shape = (seq, seq)
    if spec.sliding_window is not None:
        reach = spec.sliding_window - 1
        return splash_mask.LocalMask(shape, window_size=(reach, 0 if spec.causal else reach), offset=0)
    if spec.causal:
        return splash_mask.CausalMask(shape)
    return splash_mask.FullMask(shape)


def splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array | None,
    spec: MaskSpec,
    *,
    interpret: bool | None = None,
) -> jax.Array:
    """Splash attention on TPU (interpreted elsewhere when ``interpret`` is left ``None``).

    The TPU kernel takes the softmax scale as pre-scaled queries.
    """
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as splash_mask

    batch, seq, heads, head_dim = q.shape
    padded = round_up(seq, SPLASH_BLOCK)
    if segment_ids is None and padded != seq:
        segment_ids = jnp.zeros((batch, seq), jnp.int32)
    q, k, v, padded_segments = pad_sequence(q * spec.softmax_scale, k, v, segment_ids, padded)
    padded_dim = round_up(head_dim, LANES)
    q, k, v = (jnp.swapaxes(pad_axis(x, padded_dim, axis=3), 1, 2) for x in (q, k, v))
    if interpret is None:
        interpret = jax.default_backend() != "tpu"
    kernel = splash.make_splash_mha(
        splash_mask.MultiHeadMask([_mask(spec, padded)] * heads),
        head_shards=1,
        q_seq_shards=1,
        interpret=interpret,
    )
    if padded_segments is None:
        out = jax.vmap(kernel)(q, k, v)
    else:
        segments = jax.vmap(lambda s: splash.SegmentIds(q=s, kv=s))(padded_segments)
        out = jax.vmap(kernel)(q, k, v, segment_ids=segments)
    out = jnp.swapaxes(out, 1, 2)[:, :seq, :, :head_dim]
    if segment_ids is not None:
        out = jnp.where((segment_ids > PADDING_SEGMENT)[:, :, None, None], out, 0).astype(out.dtype)
    return out
