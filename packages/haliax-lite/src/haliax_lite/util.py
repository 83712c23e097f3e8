"""Small helpers Haliax users import from ``haliax.util``.

>>> from haliax_lite.util import index_where
>>> index_where(lambda x: x > 1, [0, 2, 3])
1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .axis import ensure_tuple
from .core import is_named_array
from .hof import is_named_or_shaped_array_like

__all__ = ["ensure_tuple", "index_where", "is_named_array", "is_named_or_shaped_array_like"]


def index_where(pred: Callable[[Any], bool], xs: Sequence, start: int = 0) -> int:
    """The first index at or after ``start`` whose element satisfies ``pred``; ValueError if none does."""
    for i in range(start, len(xs)):
        if pred(xs[i]):
            return i
    raise ValueError(f"No element of {list(xs)[start:]} satisfies the predicate")
