"""Dot-product attention over named axes, and the masks that go with it.

Heads, batch and grouped-query axes need no special handling: they are just axes that the contraction over
``Key`` (the head dimension) leaves alone, and a mask or bias broadcasts by name.

    >>> import jax, haliax_lite as hax
    >>> Pos, KPos, Head = hax.Axis("position", 4), hax.Axis("key_position", 4), hax.Axis("head_dim", 8)
    >>> q = hax.random.normal(jax.random.PRNGKey(0), (Pos, Head))
    >>> k = q.rename({"position": "key_position"})
    >>> mask = hax.nn.attention.causal_mask(Pos, KPos)
    >>> hax.nn.attention.dot_product_attention(KPos, Head, q, k, k, mask=mask).axes
    (Axis(name='position', size=4), Axis(name='head_dim', size=8))
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from haliax_lite import _namespace as hax

from ._positional import selector_names
from .normalization import softmax


def dot_product_attention_weights(
    Key: hax.AxisSelector,
    KPos: hax.AxisSelection,
    query: hax.NamedArray,
    key: hax.NamedArray,
    mask: hax.NamedArray | None = None,
    bias: hax.NamedArray | None = None,
    attention_dtype: jnp.dtype | None = None,
    precision=None,
    scaling_factor: float | None = None,
) -> hax.NamedArray:
    """Softmax over ``KPos`` of ``query · key / sqrt(|Key|) + bias``, with masked-out (False) logits at -1e9.

    Returns the weights with the query's non-``Key`` axes and ``KPos``, in the query's dtype.
    """
    orig_dtype = query.dtype
    if scaling_factor is None:
        scaling_factor = 1.0 / jnp.sqrt(query.axis_size(Key))
    query = query * scaling_factor
    if attention_dtype is not None:
        query = query.astype(attention_dtype)
        key = key.astype(attention_dtype)
    weights = hax.dot(query, key, precision=precision, axis=Key)
    if bias is not None:
        weights = weights + bias
    if mask is not None:
        weights = hax.where(mask, weights, -1e9)
    return softmax(weights, axis=KPos).astype(orig_dtype)


def dot_product_attention(
    KPos: hax.AxisSelection,
    Key: hax.AxisSelector,
    query: hax.NamedArray,
    key: hax.NamedArray,
    value: hax.NamedArray,
    mask: hax.NamedArray | None = None,
    bias: hax.NamedArray | None = None,
    attention_dtype: jnp.dtype | None = None,
    precision=None,
    scaling_factor: float | None = None,
) -> hax.NamedArray:
    """Attention of ``query`` over ``key``/``value`` along ``KPos``, contracting ``Key`` (the head dim).

    ``KPos`` must name the key/value sequence axes, which the query must not have (rename the query's
    positions, e.g. ``position`` vs ``key_position``).
    """
    if not isinstance(query, hax.NamedArray):
        raise TypeError(f"query must be a NamedArray, got {type(query).__name__}")
    query_names = {a.name for a in query.axes}
    shared = [name for name in selector_names(KPos) if name in query_names]
    if shared:
        raise ValueError(
            f"attended-to axes {shared} are also in the query {dict(query.shape)}; they must be distinct"
        )
    weights = dot_product_attention_weights(
        Key, KPos, query, key, mask, bias, attention_dtype, precision, scaling_factor
    )
    return hax.dot(weights, value, axis=KPos)


def causal_mask(
    QPos: hax.Axis, KPos: hax.Axis, q_start: int | hax.NamedArray = 0, k_start: int | hax.NamedArray = 0
) -> hax.NamedArray:
    """``True`` where query position ``q_start + i`` may attend to key position ``k_start + j`` (j <= i).

    A named ``q_start``/``k_start`` (say, one offset per batch row) adds its axes to the mask.
    """
    q_positions = _positions(QPos, q_start)
    k_positions = _positions(KPos, k_start).broadcast_axis(q_positions.axes)
    return q_positions >= k_positions


def _positions(Pos: hax.Axis, start: int | hax.NamedArray) -> hax.NamedArray:
    positions = hax.arange(Pos)
    if isinstance(start, hax.NamedArray):
        positions = positions.broadcast_axis(start.axes)
    return positions + start


def prefix_lm_mask(QPos: hax.Axis, KPos: hax.Axis, prefix_len: int, q_start: int = 0, k_start: int = 0):
    """Causal, except that the first ``prefix_len`` keys are visible to every query (PrefixLM)."""
    if isinstance(prefix_len, int) and prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")
    in_prefix = hax.arange(KPos) < prefix_len
    return in_prefix | causal_mask(QPos, KPos, q_start, k_start)


def combine_masks_and(mask1: hax.NamedArray | None, mask2: hax.NamedArray | None) -> hax.NamedArray | None:
    """Both masks (either may be ``None``, meaning "no mask")."""
    if mask1 is None or mask2 is None:
        return mask2 if mask1 is None else mask1
    mask1, mask2 = hax.broadcast_arrays(mask1, mask2, require_subset=False)
    return mask1 & mask2


def combine_masks_or(mask1: hax.NamedArray | None, mask2: hax.NamedArray | None) -> hax.NamedArray | None:
    """Either mask (either may be ``None``, meaning "no mask")."""
    if mask1 is None or mask2 is None:
        return mask2 if mask1 is None else mask1
    mask1, mask2 = hax.broadcast_arrays(mask1, mask2, require_subset=False)
    return mask1 | mask2


def mask_to_bias(mask: hax.NamedArray, mask_value: float = -1e9) -> hax.NamedArray:
    """``mask * mask_value``: ``mask_value`` where ``mask`` is True, 0 elsewhere (Haliax's convention, so
    pass the mask of the positions to *hide*, e.g. ``~causal_mask(...)``)."""
    return mask * mask_value


def dropout_mask(axes: hax.AxisSpec, dropout_rate: float, *, key: jax.Array) -> hax.NamedArray:
    """A keep-mask over ``axes`` (e.g. heads, positions, key positions) that is True with ``1 - rate``."""
    return hax.random.bernoulli(key, axes, 1 - dropout_rate)


def forgetful_causal_mask(KPos: hax.Axis, mask_prob: float, sample_prob: bool = True, *, key: jax.Array):
    """Forgetful causal masking (Liu et al. 2022): hide each key position with ``mask_prob`` (position 0
    always stays visible). With ``sample_prob`` the rate itself is drawn from ``[0, mask_prob)``."""
    first = hax.arange(KPos) == 0
    if sample_prob:
        key, rate_key = jax.random.split(key)
        mask_prob = jax.random.uniform(rate_key, (), minval=0, maxval=mask_prob)
    return hax.random.bernoulli(key, (KPos,), 1 - mask_prob) | first


def _alibi_slopes(n: int, bias_max: float) -> list[float]:
    """ALiBi's per-head slopes: a geometric sequence for a power of two heads, interleaved otherwise."""
    if math.log2(n).is_integer():
        start = 2 ** (-(2 ** -(math.log2(n) - math.log2(bias_max))))
        return [start * start**i for i in range(n)]
    closest = 2 ** math.floor(math.log2(n))
    return _alibi_slopes(closest, bias_max) + _alibi_slopes(2 * closest, bias_max)[0::2][: n - closest]


def alibi_attention_bias(
    Heads: hax.Axis, KPos: hax.Axis, bias_max: float = 8, dtype=jnp.float32
) -> hax.NamedArray:
    """The ALiBi bias (Press et al. 2022), ``(Heads, KPos)``: head ``h``'s slope times the key position.

    Added to attention logits it penalises distant keys linearly, each head at its own rate; the slopes
    are ``2 ** (-bias_max * (h + 1) / Heads.size)`` for a power-of-two head count.

    >>> import haliax_lite as hax
    >>> bias = alibi_attention_bias(hax.Axis("heads", 2), hax.Axis("key_position", 3))
    >>> bias.array.tolist()
    [[0.0, 0.0625, 0.125], [0.0, 0.00390625, 0.0078125]]
    """
    slopes = hax.named(jnp.asarray(_alibi_slopes(Heads.size, bias_max), dtype=dtype), Heads)
    return hax.arange(KPos, dtype=dtype).broadcast_axis(Heads) * slopes
