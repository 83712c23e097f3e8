"""Dropout on named arrays, optionally sharing one mask across some axes.

>>> import jax, haliax_lite as hax
>>> x = hax.ones((hax.Axis("batch", 2), hax.Axis("embed", 4)))
>>> y = hax.nn.dropout(x, 0.5, broadcast_axes="batch", inference=False, key=jax.random.PRNGKey(0))
>>> bool((y["batch", 0] == y["batch", 1]).all().array)
True
"""

from __future__ import annotations

import equinox as eqx
import jax

from haliax_lite import _namespace as hax

from ._positional import selector_names


def dropout(x, pdrop, broadcast_axes=None, *, inference: bool, key: jax.Array | None = None):
    """Zero each entry of ``x`` with probability ``pdrop`` and scale the rest by ``1 / (1 - pdrop)``.

    Entries along ``broadcast_axes`` share one draw. With ``inference=True`` (or ``pdrop == 0``) ``x`` is
    returned unchanged; otherwise ``key`` is required.
    """
    if inference or (isinstance(pdrop, (int, float)) and pdrop == 0):
        return x
    if isinstance(pdrop, (int, float)) and pdrop == 1:
        return hax.zeros_like(x)
    if key is None:
        raise RuntimeError("Dropout requires a key when running in non-deterministic mode.")
    with jax.named_scope("dropout"):
        shared = set(selector_names(broadcast_axes)) if broadcast_axes is not None else set()
        mask_axes = tuple(a for a in x.axes if a.name not in shared)
        keep = 1 - pdrop
        mask = hax.random.bernoulli(key, mask_axes, keep)
        return hax.where(mask, x / x.dtype.type(keep), 0)


class Dropout(eqx.Module):
    """Module form of ``dropout``: ``pdrop`` and ``broadcast_axes`` are static, ``inference`` is a switch."""

    pdrop: float = eqx.field(static=True)
    broadcast_axes: hax.AxisSpec | None = eqx.field(static=True)
    inference: bool = False

    def __init__(
        self, pdrop: float = 0.5, broadcast_axes: hax.AxisSpec | None = None, inference: bool = False
    ):
        if not 0 <= pdrop <= 1:
            raise ValueError(f"Dropout's pdrop must be in [0, 1], got {pdrop}")
        self.pdrop = pdrop
        self.broadcast_axes = broadcast_axes
        self.inference = inference

    @property
    def is_active(self) -> bool:
        """Whether a call would drop anything (and so needs a key)."""
        return not self.inference and self.pdrop > 0

    def __call__(
        self, x: hax.NamedArray, *, inference: bool | None = None, key: jax.Array | None = None
    ) -> hax.NamedArray:
        """Apply dropout; ``inference`` overrides the module's own flag when given."""
        return dropout(
            x,
            self.pdrop,
            broadcast_axes=self.broadcast_axes,
            inference=self.inference if inference is None else inference,
            key=key,
        )
