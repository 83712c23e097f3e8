"""``einsum`` with axis names, in Haliax's three forms:

- ordered: ``einsum("b h d, d -> b h", x, w)`` binds labels to positions (``...`` allowed);
- unordered: ``einsum("{h d} -> h", x, w)`` names the axes involved, others are kept as batch axes;
- output-only: ``einsum("-> b h", x, w)`` keeps the listed axes and contracts the rest.

Labels may be aliased to axis names with keyword bindings (``einsum("{D} ->", w, D=Depth)``).
"""

from __future__ import annotations

from .axis import Axis
from .contraction import contract
from .core import NamedArray
from .einops_syntax import Group, parse_side, split_arrow

__all__ = ["einsum"]


def _alias(label: str, aliases) -> str:
    value = aliases.get(label, label)
    return value.name if isinstance(value, Axis) else value


def _appearance_order(arrays) -> list[str]:
    seen: list[str] = []
    for a in arrays:
        seen.extend(ax.name for ax in a.axes if ax.name not in seen)
    return seen


def _expand_rhs(captures, rest: list[str], equation: str) -> list[str]:
    out: list[str] = []
    for c in captures:
        if isinstance(c, Group):
            raise ValueError(f"einsum {equation!r}: parenthesized groups are not supported")
        out.extend(rest if c is Ellipsis else [c])
    if len(set(out)) != len(out):
        raise ValueError(f"einsum {equation!r}: an output axis appears twice")
    return out


def einsum(equation: str, *arrays: NamedArray, precision=None, preferred_element_type=None, **aliases):
    """Contract ``arrays`` as ``equation`` says (see module docs).

    >>> import haliax_lite as hax
    >>> H, W, D = hax.Axis("H", 2), hax.Axis("W", 3), hax.Axis("D", 4)
    >>> hax.einsum("h w d, d -> h w", hax.ones((H, W, D)), hax.ones(D)).axes == (H, W)
    True
    """
    lhs_text, rhs_text = split_arrow(equation)
    rhs = parse_side(rhs_text, "rhs")
    everything = _appearance_order(arrays)
    if not lhs_text.strip():
        out = [_alias(c, aliases) for c in rhs.captures if c is not Ellipsis]
        if Ellipsis in rhs.captures:
            raise ValueError(f"einsum {equation!r}: '...' needs an lhs")
    elif lhs_text.strip().startswith("{"):
        lhs = parse_side(lhs_text, "lhs")
        mentioned = [_alias(c, aliases) for c in lhs.captures if c is not Ellipsis]
        unknown = [n for n in mentioned if n not in everything]
        if unknown:
            raise ValueError(f"einsum {equation!r}: axes {unknown} are in none of the arrays")
        rest = [n for n in everything if n not in mentioned]
        named_out = [_alias(c, aliases) if c is not Ellipsis else c for c in rhs.captures]
        if Ellipsis in lhs.captures:
            out = _expand_rhs(named_out, rest, equation)
        else:
            out = _expand_rhs(named_out, [], equation)
            if Ellipsis not in rhs.captures:
                out = [n for n in rest if n not in out] + out
    else:
        out = _ordered(equation, lhs_text, rhs, arrays)
    return contract(arrays, out, precision, preferred_element_type)


def _ordered(equation: str, lhs_text: str, rhs, arrays) -> list[str]:
    specs = [parse_side(part, "lhs") for part in lhs_text.split(",")]
    if len(specs) != len(arrays):
        raise ValueError(f"einsum {equation!r}: {len(specs)} operand specs for {len(arrays)} arrays")
    label_to_name: dict[str, str] = {}
    ellipsis_names: list[str] = []
    for spec, array in zip(specs, arrays, strict=True):
        caps = list(spec.captures)
        if any(isinstance(c, Group) for c in caps):
            raise ValueError(f"einsum {equation!r}: parenthesized groups are not supported")
        names = [a.name for a in array.axes]
        if Ellipsis in caps:
            head, tail = caps[: caps.index(Ellipsis)], caps[caps.index(Ellipsis) + 1 :]
            if len(head) + len(tail) > len(names):
                raise ValueError(f"einsum {equation!r}: more labels than axes in {array.axes}")
            middle = names[len(head) : len(names) - len(tail)]
            ellipsis_names.extend(n for n in middle if n not in ellipsis_names)
            bound = list(zip(head, names[: len(head)], strict=True)) + list(
                zip(tail, names[len(names) - len(tail) :], strict=True)
            )
        else:
            if len(caps) != len(names):
                raise ValueError(f"einsum {equation!r}: labels {caps} do not match the axes {array.axes}")
            bound = list(zip(caps, names, strict=True))
        for label, name in bound:
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
