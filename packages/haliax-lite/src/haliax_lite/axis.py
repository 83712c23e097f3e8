"""Axes: a name and a size, and the small algebra of selecting, removing and merging them.

An :class:`Axis` is what a positional dimension becomes once it has a name. Functions that need a size take
an ``AxisSpec`` (Axis objects); functions that can read the size off their inputs take an ``AxisSelection``
(Axis objects or bare names).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

__all__ = (
    "Axis AxisSelection AxisSelector AxisSpec axis_name axis_size axis_spec_to_shape_dict concat_axes "
    "concat_axis_specs dblock ds dslice eliminate_axes ensure_tuple intersect_axes is_axis_compatible "
    "make_axes overlapping_axes rearrange_for_partial_order replace_axis replace_missing_with_ellipsis "
    "resolve_axis selects_axis union_axes without_axes"
).split()


@dataclasses.dataclass(frozen=True)
class Axis:
    """A named dimension of a fixed size.

    >>> Batch = Axis("batch", 4)
    >>> Batch.resize(8), Batch.alias("batch2").name
    (Axis(name='batch', size=8), 'batch2')
    """

    name: str
    size: int

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Axis name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 0:
            raise ValueError(f"Axis {self.name!r} needs a non-negative int size, got {self.size!r}")

    def alias(self, new_name: str) -> Axis:
        """The same size under another name (e.g. ``Pos.alias("key_position")``)."""
        return Axis(new_name, self.size)

    def resize(self, size: int) -> Axis:
        """The same name with another size."""
        return Axis(self.name, size)


AxisSelector = Axis | str
"""One axis, by Axis or by name (its size read off the array)."""
AxisSpec = Mapping[str, int] | Axis | Sequence[Axis]
"""One or more axes with sizes: an Axis, a sequence of Axes, or a ``{name: size}`` dict."""
AxisSelection = AxisSelector | Sequence[AxisSelector] | Mapping[str, int]
"""One or more axes by Axis or name."""


def sized_axes(shape: AxisSelection, what: str) -> tuple[Axis, ...]:
    """``shape`` as a tuple of Axis objects; a ValueError naming ``what`` needed them if a bare name is given.

    >>> sized_axes(Axis("a", 2), "zeros")
    (Axis(name='a', size=2),)
    """
    axes = ensure_tuple(shape)
    for a in axes:
        if not isinstance(a, Axis):
            raise ValueError(f"{what} needs Axis objects with sizes, got {a!r} in {shape!r}")
    return axes


def make_axes(**kwargs: int) -> tuple[Axis, ...]:
    """Axes from keyword arguments, in order.

    >>> make_axes(batch=2, embed=3)
    (Axis(name='batch', size=2), Axis(name='embed', size=3))
    """
    return tuple(Axis(name, size) for name, size in kwargs.items())


def ensure_tuple(axes) -> tuple:
    """An axis selection as a tuple: a single Axis or name becomes a 1-tuple; dicts become Axes."""
    if isinstance(axes, (Axis, str)):
        return (axes,)
    if isinstance(axes, Mapping):
        return tuple(Axis(name, size) for name, size in axes.items())
    if axes is Ellipsis:
        return (Ellipsis,)
    return tuple(axes)


def axis_name(ax: AxisSelection) -> str | tuple[str, ...]:
    """The name(s) of an axis selection.

    >>> axis_name(Axis("a", 2)), axis_name(("a", Axis("b", 3)))
    ('a', ('a', 'b'))
    """
    if isinstance(ax, (Axis, str)):
        return ax.name if isinstance(ax, Axis) else ax
    return tuple(a.name if isinstance(a, Axis) else a for a in ensure_tuple(ax))


def axis_size(ax: AxisSpec) -> int:
    """The number of elements an axis spec spans (the product of sizes).

    >>> axis_size((Axis("a", 2), Axis("b", 3)))
    6
    """
    size = 1
    for a in ensure_tuple(ax):
        if not isinstance(a, Axis):
            raise ValueError(f"axis_size needs Axis objects with sizes, got {a!r}")
        size *= a.size
    return size


def _check_no_duplicates(axes: tuple, what: str = "axes") -> None:
    names = [axis_name(a) for a in axes if a is not Ellipsis]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"Duplicate axis names {dups} in {what} {axes}")


def selects_axis(selector: AxisSelection, selected: AxisSelection) -> bool:
    """Whether ``selector`` includes every axis of ``selected`` (by name; sizes must agree where known).

    >>> selects_axis(("a", "b"), "a"), selects_axis("a", Axis("b", 1))
    (True, False)
    """
    by_name = {axis_name(a): a for a in ensure_tuple(selector)}
    for a in ensure_tuple(selected):
        found = by_name.get(axis_name(a))
        if found is None:
            return False
        if isinstance(found, Axis) and isinstance(a, Axis) and found.size != a.size:
            return False
    return True


def is_axis_compatible(ax1: AxisSelector, ax2: AxisSelector) -> bool:
    """Same name, and same size when both sizes are known."""
    if axis_name(ax1) != axis_name(ax2):
        return False
    return not (isinstance(ax1, Axis) and isinstance(ax2, Axis) and ax1.size != ax2.size)


def _entries(spec: AxisSelection) -> tuple:
    """A spec's axes, dict entries (``{name: size}``, size None for a bare name) as Axes or names."""
    if isinstance(spec, Mapping):
        return tuple(name if size is None else Axis(name, size) for name, size in spec.items())
    return ensure_tuple(spec)


def _like(entries: tuple, spec: AxisSelection):
    """``entries`` in ``spec``'s form: a ``{name: size}`` dict if ``spec`` was one, else a tuple."""
    if isinstance(spec, Mapping):
        return {axis_name(a): (a.size if isinstance(a, Axis) else None) for a in entries}
    return entries


def _size(a) -> int | None:
    return a.size if isinstance(a, Axis) else None


def _check_same_size(name: str, a, b, spec, other) -> None:
    if _size(a) is not None and _size(b) is not None and _size(a) != _size(b):
        raise ValueError(f"Axis {name!r} has different sizes in {spec} and {other}: {_size(a)} != {_size(b)}")


def eliminate_axes(axis_spec: AxisSelection, to_remove: AxisSelection) -> AxisSelection:
    """``axis_spec`` without the axes of ``to_remove``, in ``axis_spec``'s order (a dict stays a dict).

    Every removed axis must be present, with the same size when both are sized (as Haliax).

    >>> eliminate_axes(make_axes(a=1, b=2, c=3), ("c", "a"))
    (Axis(name='b', size=2),)
    >>> eliminate_axes({"a": 1, "b": 2}, "b")
    {'a': 1}
    >>> eliminate_axes(make_axes(a=1), "z")
    Traceback (most recent call last):
    ...
    ValueError: Axis 'z' not present in axis spec (Axis(name='a', size=1),)
    """
    spec = _entries(axis_spec)
    present = {axis_name(a): a for a in spec}
    for ax in _entries(to_remove):
        name = axis_name(ax)
        if name not in present:
            raise ValueError(f"Axis {name!r} not present in axis spec {axis_spec}")
        _check_same_size(name, present[name], ax, axis_spec, to_remove)
    removed = {axis_name(a) for a in _entries(to_remove)}
    return _like(tuple(a for a in spec if axis_name(a) not in removed), axis_spec)


def without_axes(
    axis_spec: AxisSelection, to_remove: AxisSelection, allow_mismatched_sizes: bool = False
) -> AxisSelection:
    """Like :func:`eliminate_axes`, but axes of ``to_remove`` that are absent are ignored; one present with
    another size is still an error unless ``allow_mismatched_sizes``.

    >>> without_axes(make_axes(a=1, b=2), ("b", "z"))
    (Axis(name='a', size=1),)
    """
    spec = _entries(axis_spec)
    present = {axis_name(a): a for a in spec}
    removed = set()
    for ax in _entries(to_remove):
        name = axis_name(ax)
        if name in present:
            if not allow_mismatched_sizes:
                _check_same_size(name, present[name], ax, axis_spec, to_remove)
            removed.add(name)
    return _like(tuple(a for a in spec if axis_name(a) not in removed), axis_spec)


def replace_axis(axis_spec: AxisSelection, old: AxisSelector, new: AxisSelection) -> AxisSelection:
    """``axis_spec`` with ``old`` (matched by name) replaced, in place, by the axis or axes ``new``.

    A new axis that is already elsewhere in ``axis_spec`` is an error, as in Haliax.

    >>> replace_axis(make_axes(a=1, b=2), "a", (Axis("c", 3), Axis("d", 4)))
    (Axis(name='c', size=3), Axis(name='d', size=4), Axis(name='b', size=2))
    >>> replace_axis(("a", "b"), "a", "b")
    Traceback (most recent call last):
    ...
    ValueError: Axis 'b' already present in axis spec ('a', 'b'); replacing 'a' with it would cause a conflict
    """
    spec = _entries(axis_spec)
    names = [axis_name(a) for a in spec]
    old_name = axis_name(old)
    if old_name not in names:
        raise ValueError(f"Axis {old_name!r} not found in axis spec {axis_spec}")
    replacement = _entries(new)
    for ax in replacement:
        if axis_name(ax) in names and axis_name(ax) != old_name:
            raise ValueError(
                f"Axis {axis_name(ax)!r} already present in axis spec {axis_spec}; "
                f"replacing {old_name!r} with it would cause a conflict"
            )
    index = names.index(old_name)
    result = spec[:index] + replacement + spec[index + 1 :]
    _check_no_duplicates(result, "the result of replace_axis")
    return _like(result, axis_spec)


def concat_axes(a1: AxisSelection, a2: AxisSelection) -> tuple:
    """Axes of ``a1`` then ``a2``; a name in both is an error.

    >>> concat_axes(Axis("a", 1), "b")
    (Axis(name='a', size=1), 'b')
    """
    result = ensure_tuple(a1) + ensure_tuple(a2)
    _check_no_duplicates(result, "concat_axes")
    return result


def union_axes(a1: AxisSelection, a2: AxisSelection) -> tuple:
    """Axes of ``a1`` then those of ``a2`` not already there; a shared name with two sizes is an error."""
    spec1 = ensure_tuple(a1)
    by_name = {axis_name(a): a for a in spec1}
    extra = []
    for a in ensure_tuple(a2):
        other = by_name.get(axis_name(a))
        if other is None:
            extra.append(a)
        elif not is_axis_compatible(a, other):
            raise ValueError(f"Axis {axis_name(a)!r} has sizes {other} and {a} in {spec1} and {a2}")
    return spec1 + tuple(extra)


def intersect_axes(ax1: AxisSelection, ax2: AxisSelection) -> tuple:
    """Axes of ``ax1`` whose names are also in ``ax2``, in ``ax1``'s order.

    >>> intersect_axes(make_axes(a=1, b=2), ("b", "c"))
    (Axis(name='b', size=2),)
    """
    spec2 = {axis_name(a): a for a in ensure_tuple(ax2)}
    result = []
    for a in ensure_tuple(ax1):
        other = spec2.get(axis_name(a))
        if other is not None:
            if not is_axis_compatible(a, other):
                raise ValueError(f"Axis {axis_name(a)!r} has sizes {a} and {other} in {ax1} and {ax2}")
            result.append(a)
    return tuple(result)


overlapping_axes = intersect_axes


def axis_spec_to_shape_dict(axis_spec: AxisSelection) -> dict[str, int | None]:
    """``{name: size}`` for an axis spec; bare names have size None.

    >>> axis_spec_to_shape_dict((Axis("a", 2), "b"))
    {'a': 2, 'b': None}
    """
    result: dict[str, int | None] = {}
    for a in ensure_tuple(axis_spec):
        name = axis_name(a)
        if name in result:
            raise ValueError(f"Axis {name!r} appears twice in {axis_spec}")
        result[name] = a.size if isinstance(a, Axis) else None
    return result


def concat_axis_specs(a1: AxisSelection, a2: AxisSelection) -> AxisSelection:
    """``a1`` then ``a2``, as a dict if both are dicts, else a tuple; a shared name is an error.

    >>> concat_axis_specs({"a": 1}, {"b": 2})
    {'a': 1, 'b': 2}
    """
    if isinstance(a1, Mapping) and isinstance(a2, Mapping):
        shared = sorted(set(a1) & set(a2))
        if shared:
            raise ValueError(f"concat_axis_specs: axes {shared} are in both {a1} and {a2}")
        return {**a1, **a2}
    return concat_axes(a1, a2)


def resolve_axis(axis_spec: AxisSpec, selection: AxisSelection) -> Axis | tuple[Axis, ...]:
    """The Axis (or Axes) of ``axis_spec`` named by ``selection``; a missing name is an error.

    >>> resolve_axis(make_axes(a=1, b=2), "b")
    Axis(name='b', size=2)
    """
    by_name = {a.name: a for a in ensure_tuple(axis_spec)}

    def one(sel: AxisSelector) -> Axis:
        found = by_name.get(axis_name(sel))
        if found is None:
            raise ValueError(f"Axis {axis_name(sel)!r} is not in {tuple(by_name.values())}")
        if isinstance(sel, Axis) and sel.size != found.size:
            raise ValueError(f"{sel} does not match the size of {found}")
        return found

    if isinstance(selection, (Axis, str)):
        return one(selection)
    return tuple(one(a) for a in ensure_tuple(selection))


def replace_missing_with_ellipsis(ax1: AxisSelection, ax2: AxisSelection) -> tuple:
    """``ax1`` as a partial order against ``ax2``: each axis absent from ``ax2`` becomes ``...``, and a bare
    name that ``ax2`` knows the size of becomes that Axis; a name with two different sizes is an error.

    >>> replace_missing_with_ellipsis(("a", Axis("b", 2), "c"), (Axis("a", 1), "b"))
    (Axis(name='a', size=1), Axis(name='b', size=2), Ellipsis)
    """
    sizes = axis_spec_to_shape_dict(ax2)
    result: list = []
    for ax in ensure_tuple(ax1):
        name = axis_name(ax)
        if name not in sizes:
            result.append(Ellipsis)
            continue
        known = sizes[name]
        if isinstance(ax, Axis) and known is not None and ax.size != known:
            raise ValueError(f"Axis {name!r} has size {ax.size} in {ax1} but {known} in {ax2}")
        result.append(ax if isinstance(ax, Axis) or known is None else Axis(name, known))
    return tuple(result)


def _order_index(order: tuple, name: str) -> int:
    """Position of the axis called ``name`` in a partial order (which may hold ``...``)."""
    return next(i for i, a in enumerate(order) if a is not Ellipsis and axis_name(a) == name)


def rearrange_for_partial_order(partial_order, axes: tuple) -> tuple:
    """``axes`` reordered to fit ``partial_order``: names in that order, ``...`` standing for the rest.

    Without ``...`` the partial order must list every axis. With one or more ``...``, each remaining axis
    goes in the first ``...`` slot after the last listed axis that preceded it in ``axes`` (Haliax's
    greedy rule: the input order is kept as far as the partial order allows).

    >>> rearrange_for_partial_order(("c", ..., "a"), ("a", "b", "c", "d"))
    ('c', 'b', 'd', 'a')
    """
    order = tuple(partial_order) if not isinstance(partial_order, (str, Axis)) else (partial_order,)
    by_name = {axis_name(a): a for a in axes}
    listed = [axis_name(a) for a in order if a is not Ellipsis]
    if len(set(listed)) != len(listed):
        raise ValueError(f"Partial order {order} lists an axis twice")
    missing = [n for n in listed if n not in by_name]
    if missing:
        raise ValueError(f"Axes {missing} of the partial order {order} are not in {axes}")
    if Ellipsis not in order:
        if len(listed) != len(by_name):
            rest = [n for n in by_name if n not in listed]
            raise ValueError(f"Partial order {order} leaves out axes {rest}: list them or add ...")
        return tuple(by_name[n] for n in listed)
    slots: list[list[str]] = [[] if a is Ellipsis else [axis_name(a)] for a in order]
    target = order.index(Ellipsis)
    for name in by_name:
        if name in listed:  # later axes go in the first unfilled ... after it
            after = max(_order_index(order, name) + 1, target)
            empty = [i for i in range(after, len(slots)) if not slots[i]]
            target = empty[0] if empty else target
        else:
            slots[target].append(name)
    return tuple(by_name[n] for slot in slots for n in slot)


@dataclasses.dataclass(frozen=True)
class dslice:
    """A slice of static ``size`` starting at a possibly traced ``start`` (for dynamic indexing).

    >>> dslice.block(2, 3)
    dslice(start=6, size=3)
    """

    start: object
    size: int

    @staticmethod
    def block(idx, size: int) -> dslice:
        """The ``idx``-th block of ``size`` elements."""
        return dslice(idx * size, size)


ds = dslice
dblock = dslice.block
