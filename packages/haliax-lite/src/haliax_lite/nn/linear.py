"""``Linear``: a dense layer from named input axes to named output axes.

>>> import jax, haliax_lite as hax
>>> Embed, Mlp = hax.Axis("embed", 4), hax.Axis("mlp", 8)
>>> layer = hax.nn.Linear.init(Embed, Mlp, key=jax.random.PRNGKey(0))
>>> layer(hax.ones(Embed)).axes
(Axis(name='mlp', size=8),)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import equinox as eqx
import jax

import haliax_lite as hax


class Linear(eqx.Module):
    """``inputs · weight + bias``, contracting the ``In`` axes and producing the ``Out`` axes.

    ``In`` and ``Out`` may each be one axis or several (e.g. ``(Heads, HeadSize)``); axes of the input that
    are not in ``In`` (batch, position) pass through.
    """

    weight: hax.NamedArray
    bias: hax.NamedArray | None
    In: hax.AxisSpec = eqx.field(static=True)
    Out: hax.AxisSpec = eqx.field(static=True)
    dot_general: Callable = eqx.field(default=jax.lax.dot_general, static=True)

    @staticmethod
    def init(
        In: hax.AxisSpec,
        Out: hax.AxisSpec,
        *,
        key: jax.Array,
        use_bias: bool = True,
        out_first: bool = True,
        dot_general: Callable | None = None,
        init_scale: float = 1.0,
    ) -> Linear:
        """A layer with weights drawn from a normal truncated at ±3, scaled by ``init_scale / sqrt(|In|)``.

        ``out_first`` puts the ``Out`` axes before the ``In`` axes in the weight, as PyTorch does.
        ``dot_general`` replaces ``jax.lax.dot_general`` in the contraction (e.g. a quantized one).
        """
        joint = hax.concat_axes(Out, In) if out_first else hax.concat_axes(In, Out)
        scale = init_scale / math.sqrt(hax.axis_size(In))
        weight = hax.random.truncated_normal(key, joint, -3, 3) * scale
        bias = hax.zeros(Out) if use_bias else None
        return Linear(weight, bias, In, Out, dot_general or jax.lax.dot_general)

    def __call__(self, inputs: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Apply the layer; ``key`` is accepted (and unused) so layers can be called uniformly."""
        del key
        missing = [a.name for a in _as_tuple(self.In) if a.name not in inputs.shape]
        if missing:
            raise ValueError(f"Linear's input axes {missing} are not in the input's axes {inputs.shape}")
        out = hax.auto_sharded(hax.dot(inputs, self.weight, axis=self.In, dot_general=self.dot_general))
        if self.bias is not None:
            out = hax.auto_sharded(out + self.bias)
        return out

    @property
    def out_first(self) -> bool:
        """Whether the weight stores the ``Out`` axes before the ``In`` axes."""
        out_names = {a.name for a in _as_tuple(self.Out)}
        return self.weight.axes[0].name in out_names


def _as_tuple(spec) -> tuple:
    return tuple(spec) if isinstance(spec, (tuple, list)) else (spec,)
