"""``MaskSpec``: the static attention settings every implementation takes, checked once when made.

``attention`` builds one from its keyword arguments; a caller of an implementation module directly
(``attention_xla.xla_attention``, ``attention_pallas.pallas_attention``, ...) builds it by hand.
"""

from __future__ import annotations

import dataclasses
import math

from meltemi.kernels.errors import BadArgumentsError


@dataclasses.dataclass(frozen=True)
class MaskSpec:
    """Causal or not, the sliding window (``None``: none) and the softmax scale of one attention call.

    Hashable, so it can be a ``jit`` static or a ``custom_vjp`` non-differentiable argument. Bad values are
    a ``BadArgumentsError`` (a ``ValueError``) naming the field.

    >>> MaskSpec(causal=True, sliding_window=128, softmax_scale=0.125).sliding_window
    128
    >>> MaskSpec(causal=True, sliding_window=0, softmax_scale=0.125)
    Traceback (most recent call last):
    ...
    meltemi.kernels.errors.BadArgumentsError: MaskSpec: sliding_window must be a positive int or None, got 0
    """

    causal: bool
    sliding_window: int | None
    softmax_scale: float

    def __post_init__(self) -> None:
        problem = mask_problem(self.sliding_window, self.softmax_scale)
        if problem is not None:
            raise BadArgumentsError(f"MaskSpec: {problem}")


def mask_problem(sliding_window: object, softmax_scale: object) -> str | None:
    """What is wrong with a sliding window and softmax scale, in words (``None`` when nothing is)."""
    window_ok = sliding_window is None or (
        isinstance(sliding_window, int) and not isinstance(sliding_window, bool) and sliding_window >= 1
    )
    if not window_ok:
        return f"sliding_window must be a positive int or None, got {sliding_window!r}"
    scale_ok = (
        isinstance(softmax_scale, int | float)
        and not isinstance(softmax_scale, bool)
        and math.isfinite(softmax_scale)
        and softmax_scale > 0
    )
    if not scale_ok:
        return f"softmax_scale must be a positive finite number, got {softmax_scale!r}"
    return None
