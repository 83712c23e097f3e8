"""Haliax's ``haliax.quantization``: fp8 or int8 ``Linear`` layers as a config switch.

:func:`quantize_linear_layers` gives the chosen layers a quantized contraction (see :mod:`.quantized_ops`);
inside a ``Stacked`` each block gets its own. fp8 keeps scaling state that the backward pass replaces, so
a training step splits it off the gradient and writes it back:

    grads = eqx.filter_grad(loss)(model)
    overwrites, grads = partition_for_grad_overwrite(grads)
    model = apply_updates(model, optimizer_updates(grads), overwrites)

>>> import jax, haliax_lite as hax
>>> layer = hax.nn.Linear.init(hax.Axis("embed", 4), hax.Axis("out", 2), key=jax.random.PRNGKey(0))
>>> type(quantize_linear_layers(layer, QuantizationConfig(int8=True)).dot_general).__name__
'Int8DotGeneralOp'
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Literal, TypeVar

import equinox as eqx
import jax

from .hof import vmap
from .nn.linear import Linear
from .nn.scan import Stacked
from .quantized_ops import (
    DefaultDotGeneralOp,
    DotGeneralOp,
    Fp8CurrentDotGeneralOp,
    Fp8DotGeneralOp,
    Int8DotGeneralOp,
    OverwriteWithGradient,
)

__all__ = [
    "DefaultDotGeneralOp",
    "DotGeneralOp",
    "Fp8CurrentDotGeneralOp",
    "Fp8DotGeneralOp",
    "Int8DotGeneralOp",
    "OverwriteWithGradient",
    "QuantizationConfig",
    "apply_updates",
    "partition_for_grad_overwrite",
    "quantize_linear_layers",
]

T = TypeVar("T")


class QuantizationError(ValueError):
    """A quantization config that cannot be applied."""


@dataclasses.dataclass(frozen=True)
class QuantizationConfig:
    """Which ``Linear`` layers to quantize and how.

    ``targets``: None (every layer), a list of layer names (the last part of the path, e.g. ``"q_proj"``)
    or a regular expression matched against the dotted path (``"blocks.stacked.mlp.*"``). ``fp8`` or
    ``int8`` picks the format; ``fp8_scaling`` (``"delayed"``: Haliax's, a history of largest magnitudes
    kept in the model; ``"current"``: each tensor's own, no state), ``amax_history_length`` (delayed only)
    and ``compute_dtype`` configure fp8.
    """

    targets: list[str] | tuple[str, ...] | str | None = None
    amax_history_length: int = 1024
    compute_dtype: Any = None
    fp8: bool = False
    int8: bool = False
    fp8_scaling: Literal["delayed", "current"] = "delayed"

    def __post_init__(self):
        if self.fp8 and self.int8:
            raise QuantizationError("QuantizationConfig: choose fp8 or int8, not both")
        if self.fp8_scaling not in ("delayed", "current"):
            raise QuantizationError(
                f"QuantizationConfig: fp8_scaling must be 'delayed' or 'current', got {self.fp8_scaling!r}"
            )
        if isinstance(self.targets, list):
            object.__setattr__(self, "targets", tuple(self.targets))


def _is_overwrite(x) -> bool:
    return isinstance(x, OverwriteWithGradient)


def partition_for_grad_overwrite(grad: T) -> tuple[T, T]:
    """``(overwrites, grads)``: the quantization state in a gradient (new values to write over the model's)
    and the rest (ordinary gradients for the optimizer)."""
    return eqx.partition(grad, _is_overwrite, is_leaf=_is_overwrite)


def apply_updates(tree: T, updates, overwrites) -> T:
    """``eqx.apply_updates(tree, updates)``, except where ``overwrites`` has a value: that replaces it."""

    def one(leaf, update, overwrite):
        return overwrite if overwrite is not None else eqx.apply_updates(leaf, update)

    return jax.tree_util.tree_map(
        one, tree, updates, overwrites, is_leaf=lambda x: x is None or _is_overwrite(x)
    )


def _path_names(path) -> list[str]:
    names = []
    for key in path:
        for attribute in ("name", "key", "idx"):
            if hasattr(key, attribute):
                names.append(str(getattr(key, attribute)))
                break
    return names


def _matches(names: list[str], config: QuantizationConfig) -> bool:
    if config.targets is None:
        return True
    if isinstance(config.targets, tuple):
        return bool(names) and names[-1] in config.targets
    return re.match(config.targets, ".".join(names)) is not None


def quantize_linear_layers(tree: T, config: QuantizationConfig) -> T:
    """``tree`` with every targeted ``Linear`` using an fp8 or int8 contraction (a warning, and ``tree``
    unchanged, when the config asks for neither)."""
    if config.fp8 and config.fp8_scaling == "current":
        make = lambda: Fp8CurrentDotGeneralOp.init(config.compute_dtype)  # noqa: E731
    elif config.fp8:
        make = lambda: Fp8DotGeneralOp.init(config.amax_history_length, config.compute_dtype)  # noqa: E731
    elif config.int8:
        make = Int8DotGeneralOp.init
    else:
        warnings.warn("QuantizationConfig has neither fp8 nor int8 set: nothing is quantized", stacklevel=2)
        return tree
    found = []

    def visit(prefix: list[str], blocks: tuple, tree):
        def one(path, node):
            names = prefix + _path_names(path)
            if isinstance(node, Stacked):
                stacked = visit(names + ["stacked"], blocks + (node.Block,), node.stacked)
                return dataclasses.replace(node, stacked=stacked)
            if isinstance(node, Linear) and _matches(names, config):
                found.append(".".join(names))
                op = make
                for Block in reversed(blocks):  # one op per block of each enclosing Stacked
                    op = vmap(op, Block)
                return dataclasses.replace(node, dot_general=op())
            return node

        return jax.tree_util.tree_map_with_path(one, tree, is_leaf=lambda x: isinstance(x, (Linear, Stacked)))

    out = visit([], (), tree)
    if config.targets is not None and not found:
        raise QuantizationError(f"quantize_linear_layers: no Linear layer matches targets={config.targets!r}")
    return out
