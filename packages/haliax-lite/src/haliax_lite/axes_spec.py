"""Axis specs: which axis names (and dtype) an annotation asks of a NamedArray, parsed from a string, list
or set. ``core`` checks arrays against them; :mod:`.haxtyping` builds Haliax's annotations on them.

Specs read as follows:

- ``"batch embed"`` or ``("batch", "embed")``: exactly these axes, in this order;
- ``"batch ... embed"`` (or with ``Ellipsis``): these first and last, any axes between;
- ``{"batch", "embed"}`` or ``"{batch embed}"``: exactly these axes in any order, ``...`` allowing more.

>>> parse_axes_spec("batch ... embed").matches(["batch", "pos", "embed"], None)
True
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from types import EllipsisType
from typing import Annotated, Any

import jax.numpy as jnp

__all__ = ["DTypeCategory", "NamedArrayAxes", "NamedArrayAxesSpec", "parse_axes_spec"]


@dataclasses.dataclass(frozen=True)
class DTypeCategory:
    """A named dtype category (``float``: ``jnp.floating``) an annotation can ask for, as in Haliax.

    >>> import jax.numpy as jnp
    >>> spec = NamedArrayAxes(("a",), dtype=DTypeCategory("float", jnp.floating))
    >>> spec.matches(["a"], jnp.float32), spec.matches(["a"], jnp.int32)
    (True, False)
    """

    name: str
    category: Any

    def __repr__(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class NamedArrayAxes:
    """The axes an annotation asks of a NamedArray (Haliax's representation).

    ``before`` must come first and ``after`` last; ``subset`` lets other axes sit between them (where the
    ``...`` is); unordered specs use ``before`` only. ``dtype`` (a dtype or a category such as
    ``jnp.floating``), when set, must match too.

    >>> NamedArrayAxes(("a", "b"), ordered=False, subset=True)
    NamedArray[{a, b, ...}]
    >>> NamedArrayAxes(("a",), dtype=jnp.floating)
    NamedArray[floating a]
    """

    before: tuple[str, ...]
    after: tuple[str, ...] = ()
    ordered: bool = True
    subset: bool = False
    dtype: Any = None

    def __repr__(self) -> str:
        name = getattr(self.dtype, "name", None) or getattr(self.dtype, "__name__", self.dtype)
        dtype = "" if self.dtype is None else f"{name} "
        if self.ordered:
            parts = [*self.before, *(["..."] if self.subset else []), *self.after]
            return f"NamedArray[{dtype}{' '.join(parts)}]"
        parts = [*self.before, *(["..."] if self.subset else [])]
        return f"NamedArray[{dtype}{{{', '.join(parts)}}}]"

    def matches(self, names: Sequence[str], dtype: Any = None) -> bool:
        """Whether an array with axes called ``names`` (and of ``dtype``, if given) fits this spec."""
        if self.dtype is not None and dtype is not None:
            if not jnp.issubdtype(dtype, getattr(self.dtype, "category", self.dtype)):
                return False
        names = tuple(names)
        if not self.ordered:
            wanted = set(self.before)
            return wanted <= set(names) if self.subset else wanted == set(names) and len(wanted) == len(names)
        if not self.subset:
            return names == self.before
        return (
            len(names) >= len(self.before) + len(self.after)
            and names[: len(self.before)] == self.before
            and (not self.after or names[-len(self.after) :] == self.after)
        )


NamedArrayAxesSpec = NamedArrayAxes | str | Sequence[str | EllipsisType] | set[str | EllipsisType]
"""What an axis annotation may be written as: a NamedArrayAxes, a string, a sequence or a set of names."""


def _ordered(tokens: Sequence) -> NamedArrayAxes:
    marks = [i for i, t in enumerate(tokens) if t is Ellipsis or t == "..."]
    if len(marks) > 1:
        raise TypeError(f"An axis spec may hold one ellipsis, got {tuple(tokens)}")
    for t in tokens:
        if not (t is Ellipsis or isinstance(t, str)):
            raise TypeError(f"Axis specs hold names (str) and ..., got {t!r}")
    if not marks:
        return NamedArrayAxes(tuple(tokens))
    return NamedArrayAxes(tuple(tokens[: marks[0]]), tuple(tokens[marks[0] + 1 :]), subset=True)


def _unordered(tokens) -> NamedArrayAxes:
    names = [t for t in tokens if not (t is Ellipsis or t == "...")]
    if len(names) + 1 < len(list(tokens)):
        raise TypeError(f"An axis spec may hold one ellipsis, got {tokens}")
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"Axis specs hold names (str) and ..., got {tokens}")
    return NamedArrayAxes(tuple(sorted(names)), ordered=False, subset=len(names) < len(list(tokens)))


def parse_axes_spec(spec: Any) -> NamedArrayAxes:
    """The :class:`NamedArrayAxes` a spec, an ``Annotated`` type or a ``NamedArray[...]`` annotation means.

    >>> parse_axes_spec("{embed batch ...}")
    NamedArray[{batch, embed, ...}]
    """
    if typing.get_origin(spec) is Annotated:
        spec = next((m for m in typing.get_args(spec)[1:] if isinstance(m, NamedArrayAxes)), spec)
    spec = getattr(spec, "axes_spec", spec)  # a NamedArray["..."] annotation class
    if isinstance(spec, NamedArrayAxes):
        return spec
    if isinstance(spec, (set, frozenset)):
        return _unordered(spec)
    if isinstance(spec, str):
        tokens = spec.replace("{", " { ").replace("}", " } ").split()
        if tokens and tokens[0] == "{":
            if tokens[-1] != "}" or "{" in tokens[1:] or "}" in tokens[:-1]:
                raise TypeError(f"Unbalanced braces in axis spec {spec!r}")
            return _unordered(tokens[1:-1])
        return _ordered(tokens)
    if isinstance(spec, (tuple, list)):
        if all(isinstance(part, str) for part in spec):
            return parse_axes_spec(" ".join(spec))
        return _ordered(spec)
    raise TypeError(f"Not an axis spec: {spec!r}")
