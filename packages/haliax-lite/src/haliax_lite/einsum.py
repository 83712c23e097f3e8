"""``einsum`` with axis names, in Haliax's three forms:

- ordered: ``einsum("b h d, d -> b h", x, w)`` binds labels to positions (one ``...`` per operand);
- unordered: ``einsum("{h d} -> h", x, w)`` names the axes involved; those named only on the left are
  contracted, the others kept (``{...} ->`` contracts everything, ``{} -> ...`` keeps everything);
- output-only: ``einsum("-> b h", x, w)`` keeps the listed axes and contracts the rest.

On an unordered or output-only right side, ``...`` (any number of them) stands for the axes not listed,
placed as :func:`~haliax_lite.axis.rearrange_for_partial_order` places them. Labels may be aliased to axes
with keywords (``einsum("{d} ->", x, w, d=Depth)``); an ordered label's alias must be the axis at its
position, and an alias the equation does not use is an error, as in Haliax.
"""

from __future__ import annotations

from .axis import Axis, rearrange_for_partial_order
from .contraction import contract
from .core import NamedArray
from .einops_syntax import Group, parse_side, split_arrow

__all__ = ["einsum"]


class _Aliases:
    """Keyword aliases for labels; remembers which were used and checks sizes against the arrays."""

    def __init__(self, equation: str, aliases: dict, axes: dict[str, Axis]):
        self.equation, self.aliases, self.axes, self.used = equation, aliases, axes, set()

    def name(self, label: str) -> str:
        """The axis name a label stands for (an unknown one is a ValueError naming it)."""
        value = self.aliases.get(label, label)
        if label in self.aliases:
            self.used.add(label)
        name = value.name if isinstance(value, Axis) else value
        if name not in self.axes:
            raise ValueError(
                f"einsum {self.equation!r}: Axis {name} not present: not found in any of the input arrays "
                f"{[tuple(self.axes)]}"
            )
        if isinstance(value, Axis) and value.size != self.axes[name].size:
            raise ValueError(
                f"einsum {self.equation!r}: Size mismatch for {label!r}: the alias is {value}, "
                f"the arrays have {self.axes[name]}"
            )
        return name

    def check_all_used(self) -> None:
        unused = ", ".join(sorted(set(self.aliases) - self.used))
        if unused:
            raise ValueError(
                f"einsum {self.equation!r}: Axis alias {unused} not used. "
                f"Unused aliases from kwargs: {unused}"
            )


def _input_axes(arrays) -> dict[str, Axis]:
    seen: dict[str, Axis] = {}
    for a in arrays:
        for ax in a.axes:
            seen.setdefault(ax.name, ax)
    return seen


def _names(captures, aliases: _Aliases, equation: str) -> list:
    """Captures as axis names (``...`` kept); groups are not supported in an einsum."""
    out = []
    for c in captures:
        if isinstance(c, Group):
            raise ValueError(f"einsum {equation!r}: parenthesized groups are not supported")
        out.append(c if c is Ellipsis else aliases.name(c))
    if len({n for n in out if n is not Ellipsis}) != len([n for n in out if n is not Ellipsis]):
        raise ValueError(
            f"einsum {equation!r}: an axis appears twice in {[n for n in out if n is not Ellipsis]}"
        )
    return out


def _arranged(partial: list, names: list[str]) -> list[str]:
    return list(rearrange_for_partial_order(tuple(partial), tuple(names)))


def einsum(equation: str, *arrays: NamedArray, precision=None, preferred_element_type=None, **aliases):
    """Contract ``arrays`` as ``equation`` says (see module docs).

    >>> import haliax_lite as hax
    >>> H, W, D = hax.Axis("H", 2), hax.Axis("W", 3), hax.Axis("D", 4)
    >>> x, w = hax.ones((H, W, D)), hax.ones((D, W))
    >>> hax.einsum("h w d, d w -> h", x, w).axes == (H,)
    True
    >>> hax.einsum("{D} -> H", x, w).axes == (W, H), hax.einsum("-> D ...", x, w).axes == (D, H, W)
    (True, True)
    """
    lhs_text, rhs_text = split_arrow(equation)
    rhs = parse_side(rhs_text, "rhs", max_ellipses=None)
    everything = _input_axes(arrays)
    names = _Aliases(equation, aliases, everything)
    if not lhs_text.strip():
        out = _names(rhs.captures, names, equation)
        out = _arranged(out, list(everything)) if Ellipsis in out else out
    elif "{" in lhs_text:
        if lhs_text.count("{") > 1 or "," in lhs_text:
            raise ValueError(f"einsum {equation!r}: Cannot have multiple unordered axes in an einsum")
        out = _unordered(equation, parse_side(lhs_text, "lhs", max_ellipses=None), rhs, names, everything)
    else:
        out = _ordered(equation, lhs_text, rhs, arrays, names)
    names.check_all_used()
    return contract(arrays, out, precision, preferred_element_type)


def _unordered(equation: str, lhs, rhs, names: _Aliases, everything: dict[str, Axis]) -> list[str]:
    mentioned = [n for n in _names(lhs.captures, names, equation) if n is not Ellipsis]
    kept = _names(rhs.captures, names, equation)
    if Ellipsis in kept:  # the rhs places every axis
        return _arranged(kept, list(everything))
    if Ellipsis in lhs.captures:  # the lhs's ... contracts whatever the rhs does not list
        return kept
    remaining = [n for n in everything if n in kept or n not in mentioned]
    return _arranged([Ellipsis, *kept], remaining)


def _ordered(equation: str, lhs_text: str, rhs, arrays, names: _Aliases) -> list[str]:
    specs = [parse_side(part, "lhs") for part in lhs_text.split(",")]
    if len(specs) != len(arrays):
        raise ValueError(f"einsum {equation!r}: {len(specs)} operand specs for {len(arrays)} arrays")
    label_to_name: dict[str, str] = {}
    ellipsis_names: list[str] = []
    for operand, (spec, array) in enumerate(zip(specs, arrays, strict=True)):
        caps = list(spec.captures)
        if any(isinstance(c, Group) for c in caps):
            raise ValueError(f"einsum {equation!r}: parenthesized groups are not supported")
        axes = [a.name for a in array.axes]
        if Ellipsis in caps:
            head, tail = caps[: caps.index(Ellipsis)], caps[caps.index(Ellipsis) + 1 :]
            if len(head) + len(tail) > len(axes):
                raise ValueError(f"einsum {equation!r}: more labels than axes in {array.axes}")
            middle = axes[len(head) : len(axes) - len(tail)]
            ellipsis_names.extend(n for n in middle if n not in ellipsis_names)
            bound = list(zip(head, axes[: len(head)], strict=True)) + list(
                zip(tail, axes[len(axes) - len(tail) :], strict=True)
            )
        else:
            if len(caps) != len(axes):
                raise ValueError(f"einsum {equation!r}: labels {caps} do not match the axes {array.axes}")
            bound = list(zip(caps, axes, strict=True))
        for label, name in bound:
            if label in names.aliases and names.name(label) != name:
                raise ValueError(
                    f"einsum {equation!r}: label {label!r} is aliased to {names.name(label)!r}, but operand "
                    f"{operand} has {name!r} at its position"
                )
            if label_to_name.setdefault(label, name) != name:
                raise ValueError(
                    f"einsum {equation!r}: label {label!r} names both {label_to_name[label]!r} and {name!r}"
                )
    out: list[str] = []
    for c in rhs.captures:
        if c is Ellipsis:
            out.extend(ellipsis_names)
        elif c not in label_to_name:
            raise ValueError(f"einsum {equation!r}: output label {c!r} is not on the lhs")
        else:
            out.append(label_to_name[c])
    return out
