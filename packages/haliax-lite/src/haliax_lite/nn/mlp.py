"""``MLP``: a stack of ``Linear`` layers with an activation between them.

Hidden axes alternate between the names ``mlp`` and ``mlp2`` (or ``Width`` and its ``2`` alias), so each
layer contracts one hidden axis into the other and model parallelism can shard them.

    >>> import jax, haliax_lite as hax
    >>> In, Out = hax.Axis("embed", 4), hax.Axis("logits", 3)
    >>> mlp = hax.nn.MLP.init(In, Out, width=16, depth=2, key=jax.random.PRNGKey(0))
    >>> mlp(hax.ones(In)).axes
    (Axis(name='logits', size=3),)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax

from haliax_lite import _namespace as hax

from ._positional import split_key
from .activations import relu
from .linear import Linear

DEFAULT_WIDTH_NAME = "mlp"


class MLP(eqx.Module):
    """``depth`` hidden layers of size ``width`` between ``Input`` and ``Output`` axes."""

    activation: Callable = eqx.field(static=True)
    layers: Sequence[Linear]

    @staticmethod
    def init(
        Input: hax.AxisSpec,
        Output: hax.AxisSpec,
        width: int | hax.Axis,
        depth: int,
        activation: Callable = relu,
        *,
        out_first: bool = True,
        use_bias: bool = True,
        use_final_bias: bool = True,
        key: jax.Array,
        dot_general: Callable | None = None,
        init_scale: float = 1.0,
    ) -> MLP:
        """An MLP with ``depth`` hidden layers (``depth == 0`` is a single ``Linear``)."""
        if depth < 0:
            raise ValueError(f"MLP depth must be >= 0, got {depth}")
        Width = hax.Axis(DEFAULT_WIDTH_NAME, width) if isinstance(width, int) else width
        Width2 = Width.alias(Width.name + "2")
        keys = jax.random.split(key, depth + 1)
        shared = dict(out_first=out_first, dot_general=dot_general, init_scale=init_scale)
        hidden, final = dict(use_bias=use_bias, **shared), dict(use_bias=use_final_bias, **shared)
        sizes = [Input] + [Width if i % 2 == 0 else Width2 for i in range(depth)]
        pairs = zip(sizes[:-1], sizes[1:], keys[:-1], strict=True)
        layers = [Linear.init(a, b, key=k, **hidden) for a, b, k in pairs]
        layers.append(Linear.init(sizes[-1], Output, key=keys[-1], **final))
        return MLP(activation=activation, layers=tuple(layers))

    @property
    def In(self) -> hax.AxisSpec:
        """The input axes."""
        return self.layers[0].In

    @property
    def Out(self) -> hax.AxisSpec:
        """The output axes."""
        return self.layers[-1].Out

    def __call__(self, x: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Apply each layer, with the activation after every layer but the last."""
        keys = split_key(key, len(self.layers))
        for layer, k in zip(self.layers[:-1], keys[:-1], strict=True):
            x = self.activation(layer(x, key=k))
        return self.layers[-1](x, key=keys[-1])
