"""Small helpers Haliax users import from ``haliax.util``.

>>> from haliax_lite.util import index_where
>>> index_where(lambda x: x > 1, [0, 2, 3])
1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .axis import ensure_tuple
from .core import is_named_array
from .hof import is_named_or_shaped_array_like
from .jax_utils import is_jax_array_like

__all__ = [
    "UNSPECIFIED",
    "Unspecified",
    "ensure_tuple",
    "index_where",
    "is_jax_or_hax_array_like",
    "is_named_array",
    "is_named_or_shaped_array_like",
    "maybe_untuple",
]

T = TypeVar("T")


class Unspecified:
    """The type of :data:`UNSPECIFIED`: a default that means "not given", where None is a meaningful value."""

    def __repr__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED = Unspecified()


def maybe_untuple(x: Sequence[T] | T) -> T | Sequence[T]:
    """The element of a 1-tuple; anything else unchanged.

    >>> maybe_untuple((3,)), maybe_untuple((1, 2)), maybe_untuple("a")
    (3, (1, 2), 'a')
    """
    if isinstance(x, tuple) and len(x) == 1:
        return x[0]
    return x


def is_jax_or_hax_array_like(x: Any) -> bool:
    """Whether ``x`` is a NamedArray or has a shape and dtype (a JAX or NumPy array, a ShapeDtypeStruct).

    >>> import haliax_lite as hax
    >>> is_jax_or_hax_array_like(hax.zeros(hax.Axis("a", 2))), is_jax_or_hax_array_like(2.0)
    (True, False)
    """
    return is_named_array(x) or is_jax_array_like(x)


def index_where(pred: Callable[[Any], bool], xs: Sequence, start: int = 0) -> int:
    """The first index at or after ``start`` whose element satisfies ``pred``; ValueError if none does."""
    for i in range(start, len(xs)):
        if pred(xs[i]):
            return i
    raise ValueError(f"No element of {list(xs)[start:]} satisfies the predicate")
