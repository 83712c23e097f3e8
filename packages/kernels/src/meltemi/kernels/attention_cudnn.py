"""cuDNN flash attention (through ``jax.nn.dot_product_attention``) behind this package's interface.

The layouts already agree (``[batch, seq, heads, head_dim]``, grouped key/value heads). cuDNN has no
segment ids, so packed documents are not supported here; the sliding window maps to cuDNN's
``local_window_size`` (keys up to ``w - 1`` positions back; cuDNN itself refuses a window that also
reaches forward, i.e. a non-causal one, which ``implementation="xla"`` still runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from meltemi.kernels.mask_spec import MaskSpec

CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)
CUDNN_MAX_HEAD_DIM = 128


def cudnn_unsupported_reason(
    q: jax.Array, segment_ids: jax.Array | None, *, causal: bool, sliding_window: int | None
) -> str | None:
    """Why cuDNN cannot run these arguments, or ``None`` when it can."""
    if segment_ids is not None:
        return "cuDNN attention takes no segment_ids"
    if sliding_window is not None and not causal:
        return "cuDNN supports a sliding window only with causal attention"
    if q.dtype not in CUDNN_DTYPES:
        return f"cuDNN attention needs bfloat16 or float16, got {q.dtype}"
    head_dim = q.shape[-1]
    if head_dim % 8 or head_dim > CUDNN_MAX_HEAD_DIM:
        return (
            f"cuDNN attention needs head_dim a multiple of 8 and at most {CUDNN_MAX_HEAD_DIM}, got {head_dim}"
        )
    return None


def cudnn_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, spec: MaskSpec, *, implementation: str = "cudnn"
) -> jax.Array:
    """Attention by ``jax.nn.dot_product_attention``; ``implementation="xla"`` runs the same call anywhere.

    >>> import jax.numpy as jnp
    >>> from meltemi.kernels import MaskSpec
    >>> x = jnp.ones((1, 4, 2, 8))
    >>> cudnn_attention(x, x, x, MaskSpec(True, 2, 0.35), implementation="xla").shape
    (1, 4, 2, 8)
    """
    window = None
    if spec.sliding_window is not None:
        reach = spec.sliding_window - 1
        window = (reach, 0 if spec.causal else reach)
    return jax.nn.dot_product_attention(
        q,
        k,
        v,
        scale=spec.softmax_scale,
        is_causal=spec.causal,
        local_window_size=window,
        implementation=implementation,
    )
