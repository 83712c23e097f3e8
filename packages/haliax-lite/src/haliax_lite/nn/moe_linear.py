"""``MoELinear``: one dense layer per expert, applied to tokens already sorted by expert (Haliax's layer).

A mixture-of-experts block routes each token to an expert, sorts the tokens so each expert's are
contiguous, and counts them (``group_sizes``). ``MoELinear`` then multiplies each run of tokens by its
expert's weight in one ``jax.lax.ragged_dot``, without padding every expert to the largest.

>>> import jax, jax.numpy as jnp, haliax_lite as hax
>>> Experts, Tokens = hax.Axis("experts", 2), hax.Axis("tokens", 5)
>>> Embed, Mlp = hax.Axis("embed", 4), hax.Axis("mlp", 8)
>>> layer = hax.nn.MoELinear.init(Experts, Embed, Mlp, key=jax.random.PRNGKey(0))
>>> group_sizes = hax.named(jnp.array([3, 2]), Experts)  # tokens 0-2 go to expert 0, 3-4 to expert 1
>>> layer(hax.ones((Tokens, Embed)), group_sizes).shape
{'tokens': 5, 'mlp': 8}
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from haliax_lite import _namespace as hax

from ._inputs import check_layer_input

__all__ = ["MoELinear"]


class MoELinear(eqx.Module):
    """``inputs · weight[expert] + bias``, each token using the weight of the expert its group belongs to.

    The tokens are the input's axes other than ``In``, flattened in the input's axis order (C order): the
    first ``group_sizes[0]`` belong to expert 0, the next ``group_sizes[1]`` to expert 1, and so on. Tokens
    past ``sum(group_sizes)`` get only the bias. The bias has only the ``Out`` axis (shared by the experts),
    as in Haliax. The output keeps the input's axis order with ``In`` replaced by ``Out``.
    """

    weight: hax.NamedArray
    bias: hax.NamedArray | None
    Experts: hax.Axis = eqx.field(static=True)
    In: hax.Axis = eqx.field(static=True)
    Out: hax.Axis = eqx.field(static=True)
    use_gmm: bool = eqx.field(default=False, static=True)

    @staticmethod
    def init(
        Experts: hax.Axis,
        In: hax.Axis,
        Out: hax.Axis,
        *,
        key: jax.Array,
        use_bias: bool = True,
        out_first: bool = False,
        init_scale: float = 1.0,
        use_gmm: bool = False,
    ) -> MoELinear:
        """A layer with weights drawn from a normal truncated at ±3, scaled by ``init_scale / sqrt(|In|)``.

        The weight is ``(Experts, In, Out)``, or ``(Experts, Out, In)`` with ``out_first``. ``use_gmm``
        (Haliax's switch to its TPU megablox kernel) is kept for compatibility and changes nothing here:
        haliax-lite always calls ``jax.lax.ragged_dot``, which computes the same grouped product.
        """
        for what, ax in (("Experts", Experts), ("In", In), ("Out", Out)):
            if not isinstance(ax, hax.Axis):
                raise TypeError(f"MoELinear.init: {what} must be one hax.Axis with a size, got {ax!r}")
        names = [Experts.name, In.name, Out.name]
        if len(set(names)) != 3:
            raise ValueError(
                f"MoELinear.init: Experts, In and Out need three distinct names, got {names}; give one "
                "another name with Axis.alias"
            )
        joint = (Experts, Out, In) if out_first else (Experts, In, Out)
        weight = hax.random.truncated_normal(key, joint, -3, 3) * (init_scale / math.sqrt(In.size))
        bias = hax.zeros(Out) if use_bias else None
        return MoELinear(weight, bias, Experts, In, Out, use_gmm=use_gmm)

    def __call__(
        self,
        inputs: hax.NamedArray,
        group_sizes: hax.NamedArray | jax.Array,
        *,
        key: jax.Array | None = None,
    ) -> hax.NamedArray:
        """Apply each expert to its run of tokens; ``group_sizes`` counts them (an ``Experts`` array of ints).

        ``key`` is accepted (and unused) so layers can be called uniformly.
        """
        del key
        check_layer_input(inputs, self.In, self.Out, "MoELinear")
        sizes = self._group_sizes_array(group_sizes)

        tokens = [a for a in inputs.axes if a.name != self.In.name]
        lhs = hax.rearrange(inputs, (*tokens, self.In)).array.reshape(-1, self.In.size)
        rhs = hax.rearrange(self.weight, (self.Experts, self.In, self.Out)).array
        dtype = jnp.result_type(lhs, rhs)
        out = jax.lax.ragged_dot(lhs.astype(dtype), rhs.astype(dtype), sizes)

        result = hax.NamedArray(out.reshape(*(a.size for a in tokens), self.Out.size), (*tokens, self.Out))
        result = hax.rearrange(result, [self.Out if a.name == self.In.name else a for a in inputs.axes])
        if self.bias is not None:
            result = result + self.bias
        return hax.auto_sharded(result)

    def _group_sizes_array(self, group_sizes: hax.NamedArray | jax.Array) -> jax.Array:
        """``group_sizes`` as the ``(Experts,)`` int32 array ``ragged_dot`` takes, checked."""
        if isinstance(group_sizes, hax.NamedArray):
            if group_sizes.axes != (self.Experts,):
                raise ValueError(
                    f"MoELinear: group_sizes must have exactly the axis {self.Experts}, "
                    f"got {group_sizes.axes}"
                )
            group_sizes = group_sizes.array
        group_sizes = jnp.asarray(group_sizes)
        if group_sizes.shape != (self.Experts.size,):
            raise ValueError(
                f"MoELinear: group_sizes must have shape ({self.Experts.size},), one count per expert of "
                f"{self.Experts}, got {group_sizes.shape}"
            )
        if not jnp.issubdtype(group_sizes.dtype, jnp.integer):
            raise TypeError(
                f"MoELinear: group_sizes must hold integers (token counts), got {group_sizes.dtype}"
            )
        return group_sizes.astype(jnp.int32)

    @property
    def out_first(self) -> bool:
        """Whether the weight stores ``Out`` before ``In`` (read from the end, so it holds when stacked)."""
        return self.weight.axes[-1].name != self.Out.name
