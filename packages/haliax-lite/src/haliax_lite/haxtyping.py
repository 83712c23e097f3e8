"""Axis annotations for NamedArrays: ``Named[NamedArray, "batch ... embed"]``.

It is ``typing.Annotated[NamedArray, NamedArrayAxes(...)]``, as in Haliax: type checkers see a NamedArray
and the axes travel as metadata that code can check at run time with ``x.matches_axes(spec)``. Specs are
read by :func:`.axes_spec.parse_axes_spec` (a string, a sequence with ``...``, or a set).

>>> import typing, haliax_lite as hax
>>> spec = typing.get_args(Named[hax.NamedArray, "batch ... embed"])[1]
>>> spec
NamedArray[batch ... embed]
>>> hax.zeros((hax.Axis("batch", 2), hax.Axis("pos", 3), hax.Axis("embed", 4))).matches_axes(spec)
True
"""

from __future__ import annotations

from typing import Annotated, Any

from .axes_spec import DTypeCategory, NamedArrayAxes, NamedArrayAxesSpec, parse_axes_spec
from .core import NamedArray

__all__ = ["DTypeCategory", "Named", "NamedArrayAxes", "NamedArrayAxesSpec"]


class Named:
    """``Named[NamedArray, spec]`` (or ``Named[spec]``): ``Annotated[NamedArray, NamedArrayAxes]``.

    >>> import haliax_lite as hax
    >>> Named[hax.NamedArray, "batch embed"]
    typing.Annotated[haliax_lite.core.NamedArray, NamedArray[batch embed]]
    """

    def __class_getitem__(cls, item) -> Any:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], type):
            base, spec = item
        else:
            base, spec = NamedArray, item
        return Annotated[base, parse_axes_spec(spec)]
