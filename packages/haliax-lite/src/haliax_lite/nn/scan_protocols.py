"""The types Haliax's ``haliax.nn.scan`` names for repeated layers and the functions run over them.

``Stacked`` and ``BlockSeq`` both satisfy :class:`BlockFoldable`, so model code can take either:

>>> import jax, haliax_lite as hax
>>> stack = hax.nn.Stacked.init(hax.Axis("layers", 2), hax.nn.Linear)(
...     hax.Axis("embed", 3), hax.Axis("out", 3), key=jax.random.split(jax.random.PRNGKey(0), 2))
>>> isinstance(stack, BlockFoldable)
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["BlockFoldable", "FoldFunction", "ModuleInit", "ScanFunction", "VmapFunction"]

M = TypeVar("M")
M_co = TypeVar("M_co", covariant=True)
M_contra = TypeVar("M_contra", contravariant=True)
CarryT = TypeVar("CarryT")
OutputT_co = TypeVar("OutputT_co", covariant=True)


class FoldFunction(Protocol[M_contra, CarryT]):
    """``fn(block, carry, *args, **kwargs) -> carry``: one step of ``fold_via``."""

    def __call__(self, module: M_contra, carry: CarryT, *args: Any, **kwargs: Any) -> CarryT: ...


class ScanFunction(Protocol[M_contra, CarryT, OutputT_co]):
    """``fn(block, carry, *args, **kwargs) -> (carry, output)``: one step of ``scan_via``."""

    def __call__(
        self, module: M_contra, carry: CarryT, *args: Any, **kwargs: Any
    ) -> tuple[CarryT, OutputT_co]: ...


class VmapFunction(Protocol[M_contra, OutputT_co]):
    """``fn(block, *args, **kwargs) -> output``: what ``vmap_via`` runs on every block."""

    def __call__(self, module: M_contra, *args: Any, **kwargs: Any) -> OutputT_co: ...


class ModuleInit(Protocol[M_co]):
    """A module constructor, such as ``Stacked.init(Block, Module)`` returns."""

    def __call__(self, *args: Any, **kwargs: Any) -> M_co: ...


@runtime_checkable
class BlockFoldable(Protocol[M]):
    """What ``Stacked`` and ``BlockSeq`` share: blocks along ``Block``, folded, scanned or mapped over."""

    Block: Any

    def fold(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...

    def scan(self, init: Any, *args: Any, **kwargs: Any) -> Any: ...

    def vmap(self, *args: Any, **kwargs: Any) -> Any: ...

    def fold_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def scan_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def vmap_via(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...

    def unstacked(self) -> Sequence[M]: ...

    def get_layer(self, index: int) -> M: ...
