"""``Embedding``: a lookup table from token ids to named vectors, and its transpose for output logits.

>>> import jax, haliax_lite as hax
>>> Vocab, Embed, Pos = hax.Axis("vocab", 10), hax.Axis("embed", 4), hax.Axis("position", 3)
>>> table = hax.nn.Embedding.init(Vocab, Embed, key=jax.random.PRNGKey(0))
>>> vectors = table.embed(hax.arange(Pos))
>>> table.unembed(vectors).axes
(Axis(name='position', size=3), Axis(name='vocab', size=10))
"""

from __future__ import annotations

import equinox as eqx
import jax

from haliax_lite import _namespace as hax


class Embedding(eqx.Module):
    """A ``(Vocab, *Embed)`` table; ``embed`` looks ids up, ``unembed`` scores vectors against every row."""

    weight: hax.NamedArray
    Vocab: hax.Axis = eqx.field(static=True)
    Embed: hax.AxisSpec = eqx.field(static=True)

    @staticmethod
    def init(Vocab: hax.Axis, Embed: hax.AxisSpec, *, init_scale: float = 1, key: jax.Array) -> Embedding:
        """A table drawn from a normal truncated at ±3, scaled by ``init_scale / |Embed|`` (as in Haliax)."""
        weight = hax.random.truncated_normal(key, hax.concat_axes(Vocab, Embed), -3, 3)
        return Embedding(weight * (init_scale / hax.axis_size(Embed)), Vocab, Embed)

    def __call__(self, input_ids: hax.NamedArray, *, key: jax.Array | None = None) -> hax.NamedArray:
        """Same as ``embed``; ``key`` is accepted and unused."""
        del key
        return self.embed(input_ids)

    def embed(self, input_ids: hax.NamedArray) -> hax.NamedArray:
        """The rows for ``input_ids``: its axes followed by ``Embed``."""
        return hax.take(self.weight, self.Vocab, input_ids)

    def unembed(self, input_embeds: hax.NamedArray) -> hax.NamedArray:
        """Logits over ``Vocab``: ``input_embeds`` contracted with the table over ``Embed``."""
        return hax.dot(input_embeds, self.weight, axis=self.Embed)
