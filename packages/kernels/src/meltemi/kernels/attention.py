"""``attention``: one interface, several implementations, and an inspectable choice between them."""

from __future__ import annotations

import dataclasses
import logging
from typing import Literal

import jax

from meltemi.kernels._attention_args import WHERE, check_attention_inputs
from meltemi.kernels._checks import report_nonfinite
from meltemi.kernels.attention_cudnn import cudnn_attention, cudnn_unsupported_reason
from meltemi.kernels.attention_pallas import pallas_attention
from meltemi.kernels.attention_reference import reference_attention
from meltemi.kernels.attention_splash import splash_attention
from meltemi.kernels.attention_xla import xla_attention
from meltemi.kernels.errors import UnknownImplementationError, UnsupportedError
from meltemi.kernels.mask_spec import MaskSpec

logger = logging.getLogger(__name__)

AttentionImplementation = Literal["auto", "reference", "xla", "pallas", "mosaic", "splash", "cudnn"]
IMPLEMENTATIONS = ("auto", "reference", "xla", "pallas", "mosaic", "splash", "cudnn")
_MOSAIC_INTERPRETED = (
    ", and attention_mosaic.mosaic_attention with MosaicAttentionConfig(interpret=...) runs the Mosaic "
    "kernels interpreted, off a GPU"
)


@dataclasses.dataclass(frozen=True)
class Choice:
    """Which implementation ``"auto"`` runs, and why."""

    implementation: str
    reason: str


def backend_platform() -> str:
    """JAX's default backend, with GPUs told apart as ``"cuda"`` or ``"rocm"`` (JAX calls both ``"gpu"``)."""
    platform = jax.default_backend()
    if platform == "gpu":
        return "rocm" if "rocm" in jax.devices()[0].client.platform_version.lower() else "cuda"
    return platform


def choose_attention_implementation(
    q: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    causal: bool = True,
    sliding_window: int | None = None,
    platform: str | None = None,
) -> Choice:
    """What ``implementation="auto"`` picks for these arguments on ``platform`` (default: JAX's backend).

    >>> import jax.numpy as jnp
    >>> choose_attention_implementation(jnp.zeros((1, 8, 2, 64), jnp.bfloat16), platform="gpu").implementation
    'cudnn'
    >>> choose_attention_implementation(jnp.zeros((1, 8, 2, 64), jnp.float32), platform="gpu")
    Choice(implementation='pallas', reason='cuDNN attention needs bfloat16 or float16, got float32')
    """
    platform = platform or backend_platform()
    if platform == "tpu":
        return Choice("splash", "TPU: JAX's splash-attention kernel")
    if platform == "rocm":
        return Choice("xla", "ROCm: cuDNN is NVIDIA's, and the Pallas kernels are tested on CUDA only")
    if platform in ("gpu", "cuda"):
        why_not = cudnn_unsupported_reason(q, segment_ids, causal=causal, sliding_window=sliding_window)
        if why_not is None:
            return Choice("cudnn", "GPU: cuDNN flash attention supports these arguments")
        return Choice("pallas", why_not)
    return Choice("xla", f"{platform}: no compiled kernel here, blockwise XLA keeps memory linear")


def attention_unsupported_reason(
    implementation: str,
    q: jax.Array,
    segment_ids: jax.Array | None = None,
    *,
    causal: bool = True,
    sliding_window: int | None = None,
    platform: str | None = None,
) -> str | None:
    """Why ``implementation`` cannot run these arguments on ``platform`` (default: JAX's backend), or
    ``None`` when it can: what ``attention`` raises for, asked before a program is traced.

    >>> import jax.numpy as jnp
    >>> q = jnp.zeros((1, 8, 2, 64), jnp.bfloat16)
    >>> attention_unsupported_reason("cudnn", q, platform="cpu")
    "cuDNN runs on an NVIDIA GPU, and JAX's backend here is 'cpu'"
    >>> attention_unsupported_reason("xla", q, platform="cpu") is None
    True
    """
    platform = platform or backend_platform()
    if implementation == "cudnn":
        why_not = cudnn_unsupported_reason(q, segment_ids, causal=causal, sliding_window=sliding_window)
        if why_not is None and platform not in ("cuda", "gpu"):
            why_not = f"cuDNN runs on an NVIDIA GPU, and JAX's backend here is {platform!r}"
        return why_not
    if implementation == "mosaic":
        # Imported here, not with the package: Mosaic GPU's Pallas module takes a quarter of a second to
        # import, which every program that never runs this kernel would pay at start-up.
        from meltemi.kernels.attention_mosaic import mosaic_unsupported_reason

        capability = getattr(jax.devices()[0], "compute_capability", None) if platform == "cuda" else None
        return mosaic_unsupported_reason(q, platform=platform, compute_capability=capability)
    return None


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    causal: bool = True,
    segment_ids: jax.Array | None = None,
    sliding_window: int | None = None,
    softmax_scale: float | None = None,
    implementation: AttentionImplementation = "auto",
    check_finite: bool = True,
) -> jax.Array:
    """Multi-head softmax attention over ``[batch, seq, heads, head_dim]`` arrays.

    - ``k`` and ``v`` may have fewer heads than ``q`` (grouped-query attention) if they divide them.
    - ``segment_ids`` ``[batch, seq]`` (integers) keep packed documents apart; a negative id marks padding,
      which attends to nothing and whose output is zero.
    - ``sliding_window=w``: each query sees the keys less than ``w`` positions away (behind it when causal).
    - ``softmax_scale`` defaults to ``1 / sqrt(head_dim)``.
    - ``implementation``: ``"reference"`` (full scores, the oracle), ``"xla"`` (blockwise, linear memory),
      ``"pallas"`` (our flash kernels; interpreted off GPU), ``"mosaic"`` (the same kernels on Mosaic GPU,
      for Hopper GPUs; bfloat16 or float16), ``"splash"`` (TPU), ``"cudnn"`` (GPU), or ``"auto"`` (see
      :func:`choose_attention_implementation`).
    - ``q``, ``k`` and ``v`` must share a floating dtype (as ``cross_entropy``'s ``hidden`` and
      ``unembedding`` must); scores and softmax statistics are float32 whatever it is.
    - ``check_finite``: NaN or infinite inputs raise ``NonFiniteError`` naming the argument; inside
      ``jit`` the computation fails with ``jax.errors.JaxRuntimeError`` carrying that message (README).

    >>> import jax.numpy as jnp
    >>> q = jnp.ones((2, 10, 4, 16)); kv = jnp.ones((2, 10, 2, 16))
    >>> attention(q, kv, kv, implementation="xla").shape
    (2, 10, 4, 16)
    """
    spec = check_attention_inputs(
        q, k, v, segment_ids, causal=causal, sliding_window=sliding_window, softmax_scale=softmax_scale
    )
    if implementation not in IMPLEMENTATIONS:
        raise UnknownImplementationError(
            f"{WHERE}: implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}"
        )
    if check_finite:
        report_nonfinite(WHERE, q=q, k=k, v=v)
    if implementation == "auto":
        choice = choose_attention_implementation(
            q, segment_ids, causal=spec.causal, sliding_window=spec.sliding_window
        )
        logger.debug("attention: using %s (%s)", choice.implementation, choice.reason)
        implementation = choice.implementation
    return _run(implementation, q, k, v, segment_ids, spec)


def _run(implementation: str, q, k, v, segment_ids, spec: MaskSpec) -> jax.Array:
    if implementation == "reference":
        return reference_attention(q, k, v, segment_ids, spec)
    if implementation == "xla":
        return xla_attention(q, k, v, segment_ids, spec)
    if implementation == "pallas":
        return pallas_attention(q, k, v, segment_ids, spec)
    if implementation == "splash":
        return splash_attention(q, k, v, segment_ids, spec)
    mask = {"causal": spec.causal, "sliding_window": spec.sliding_window}
    why_not = attention_unsupported_reason(implementation, q, segment_ids, **mask)
    if why_not is not None:
        raise UnsupportedError(
            f"{WHERE}: implementation={implementation!r} cannot run these arguments: {why_not}; 'auto' picks "
            f"one that can{_MOSAIC_INTERPRETED if implementation == 'mosaic' else ''}",
            implementation=implementation,
            reason=why_not,
        )
    if implementation == "mosaic":
        from meltemi.kernels.attention_mosaic import mosaic_attention  # imported late: see above

        return mosaic_attention(q, k, v, segment_ids, spec)
    return cudnn_attention(q, k, v, spec)
