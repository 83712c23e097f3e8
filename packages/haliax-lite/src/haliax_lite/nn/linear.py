"""``Linear``: a dense layer from named input axes to named output axes.

>>> import jax, haliax_lite as hax
>>> Embed, Mlp = hax.Axis("embed", 4), hax.Axis("mlp", 8)
>>> layer = hax.nn.Linear.init(Embed, Mlp, key=jax.random.PRNGKey(0))
>>> layer(hax.ones(Embed)).axes
(Axis(name='mlp', size=8),)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import equinox as eqx
import jax

from haliax_lite import _namespace as hax
from haliax_lite.quantized_ops import DefaultDotGeneralOp
from haliax_lite.serialization import ModuleWithStateDictSerialization

_FLAT_IN, _FLAT_OUT = "__IN__", "__OUT__"


class Linear(ModuleWithStateDictSerialization):
    """``inputs · weight + bias``, contracting the ``In`` axes and producing the ``Out`` axes.

    ``In`` and ``Out`` may each be one axis or several (e.g. ``(Heads, HeadSize)``); axes of the input that
    are not in ``In`` (batch, position) pass through.
    """

    weight: hax.NamedArray
    bias: hax.NamedArray | None
    In: hax.AxisSpec = eqx.field(static=True)
    Out: hax.AxisSpec = eqx.field(static=True)
    dot_general: Callable = eqx.field(default_factory=DefaultDotGeneralOp)

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
        ``dot_general`` replaces ``jax.lax.dot_general`` in the contraction: a module such as
        ``hax.quantization.Int8DotGeneralOp`` (see :func:`haliax_lite.quantization.quantize_linear_layers`);
        a plain function works too, but makes the layer a pytree with a non-array leaf.
        """
        # a {name: size} dict becomes Axes: the spec is a static field, so it must be hashable
        In = hax.ensure_tuple(In) if isinstance(In, Mapping) else In
        Out = hax.ensure_tuple(Out) if isinstance(Out, Mapping) else Out
        shared = sorted(set(hax.axis_name(hax.ensure_tuple(In))) & set(hax.axis_name(hax.ensure_tuple(Out))))
        if shared:
            example = shared[0]
            raise ValueError(
                f"Linear.init: In and Out share the axis names {shared}; the weight needs distinct names. "
                f"Give the output another name, e.g. Out=In.alias('{example}_out') for an Axis (or "
                f"{{'{example}_out': size}}), and hax.rename the result back if needed"
            )
        joint = hax.concat_axes(Out, In) if out_first else hax.concat_axes(In, Out)
        scale = init_scale / math.sqrt(hax.axis_size(In))
        weight = hax.random.truncated_normal(key, joint, -3, 3) * scale
        bias = hax.zeros(Out) if use_bias else None
        return Linear(weight, bias, In, Out, dot_general or DefaultDotGeneralOp())

    def __call__(self, inputs: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Apply the layer; ``key`` is accepted (and unused) so layers can be called uniformly."""
        del key
        missing = [a.name for a in hax.ensure_tuple(self.In) if a.name not in inputs.shape]
        if missing:
            raise ValueError(f"Linear's input axes {missing} are not in the input's axes {inputs.shape}")
        out = hax.auto_sharded(hax.dot(inputs, self.weight, axis=self.In, dot_general=self.dot_general))
        if self.bias is not None:
            out = hax.auto_sharded(out + self.bias)
        return out

    @property
    def out_first(self) -> bool:
        """Whether the weight stores the ``Out`` axes before the ``In`` axes."""
        out_names = {a.name for a in hax.ensure_tuple(self.Out)}
        return self.weight.axes[0].name in out_names

    def flatten_for_export(self) -> Linear:
        """This layer with several ``In`` (or ``Out``) axes merged into one, as PyTorch stores a weight
        (``(out, in)`` when ``out_first``); unchanged when both are single axes."""
        if isinstance(self.In, hax.Axis) and isinstance(self.Out, hax.Axis):
            return self
        In = hax.Axis(_FLAT_IN, hax.axis_size(self.In))
        Out = hax.Axis(_FLAT_OUT, hax.axis_size(self.Out))
        weight = hax.flatten_axes(hax.flatten_axes(self.weight, self.Out, Out), self.In, In)
        weight = weight.rearrange((..., Out, In) if self.out_first else (..., In, Out))
        bias = None if self.bias is None else hax.flatten_axes(self.bias, self.Out, Out)
        return Linear(weight, bias, In, Out, self.dot_general)

    def unflatten_from_export(self, template: Linear) -> Linear:
        """Undo :meth:`flatten_for_export`: ``template`` gives the named axes and their order."""
        if (self.In, self.Out) == (template.In, template.Out):
            return self
        weight = hax.unflatten_axis(
            hax.unflatten_axis(self.weight, _FLAT_OUT, template.Out), _FLAT_IN, template.In
        )
        weight = weight.rearrange(template.weight.axes)
        bias = self.bias
        if bias is not None:
            bias = hax.unflatten_axis(bias, _FLAT_OUT, template.Out).rearrange(template.bias.axes)
        return Linear(weight, bias, template.In, template.Out, template.dot_general)
