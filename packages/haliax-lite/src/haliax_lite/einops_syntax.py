"""einops-style strings for named arrays: the parser shared with ``einsum``, and ``rearrange``.

A side of an expression is a list of *captures*: an identifier, ``...``, or a parenthesized group
``(name: a b)`` / ``(a b)``; a side wrapped in ``{}`` is *unordered* (matched by name, not position).
For ``rearrange``, ``"N C (ph H) -> N (P: ph) C H"`` binds positions (ordered lhs) and
``"{H W} -> ... W H"`` picks axes by name (unordered lhs). Split parts get sizes from keyword bindings
(ints, Axes, or alias names); merged groups on the rhs must be named, ``(name: a b)``.
"""

from __future__ import annotations

import dataclasses
import math
import re

import jax.numpy as jnp

from .axis import Axis, _check_no_duplicates, rearrange_for_partial_order
from .core import NamedArray

_TOKEN = re.compile(r"\s*(\.\.\.|->|[A-Za-z_][A-Za-z0-9_]*|[(){}:,])")


@dataclasses.dataclass(frozen=True)
class Group:
    """``(name: a b)`` (name may be None): split or merged axes."""

    name: str | None
    parts: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Side:
    captures: tuple  # of str, Ellipsis or Group
    ordered: bool


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"Cannot parse {text!r} at position {pos}: {text[pos:]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def parse_side(text: str, what: str, max_ellipses: int | None = 1) -> Side:
    """Parse one side of an expression (commas count as spaces); ``max_ellipses=None`` allows any number."""
    tokens = [t for t in _tokens(text) if t != ","]
    ordered = True
    if tokens and tokens[0] == "{":
        if tokens[-1] != "}":
            raise ValueError(f"Unclosed '{{' in {what} {text!r}")
        tokens, ordered = tokens[1:-1], False
    captures: list = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "(":
            close = tokens.index(")", i) if ")" in tokens[i:] else -1
            if close < 0:
                raise ValueError(f"Unclosed '(' in {what} {text!r}")
            inner = tokens[i + 1 : close]
            name = None
            if len(inner) >= 2 and inner[1] == ":":
                name, inner = inner[0], inner[2:]
            if any(not t.isidentifier() for t in inner):
                raise ValueError(f"Bad group in {what} {text!r}: only names may appear in parentheses")
            captures.append(Group(name, tuple(inner)))
            i = close + 1
        elif token == "...":
            captures.append(Ellipsis)
            i += 1
        elif token.isidentifier():
            captures.append(token)
            i += 1
        else:
            raise ValueError(f"Unexpected {token!r} in {what} {text!r}")
    if max_ellipses is not None and captures.count(Ellipsis) > max_ellipses:
        most = "one" if max_ellipses == 1 else str(max_ellipses)
        raise ValueError(f"At most {most} '...' in {what} {text!r}")
    return Side(tuple(captures), ordered)


def split_arrow(text: str) -> tuple[str, str]:
    if text.count("->") != 1:
        raise ValueError(f"Expected exactly one '->' in {text!r}")
    lhs, rhs = text.split("->")
    return lhs, rhs


def _bound_name(ident: str, bindings) -> str:
    value = bindings.get(ident, ident)
    return value.name if isinstance(value, Axis) else value if isinstance(value, str) else ident


def _split_sizes(group: Group, total: int, bindings, text: str) -> list[int]:
    sizes: list[int | None] = []
    for part in group.parts:
        value = bindings.get(part)
        sizes.append(value.size if isinstance(value, Axis) else value if isinstance(value, int) else None)
    unknown = [i for i, s in enumerate(sizes) if s is None]
    known = math.prod(s for s in sizes if s is not None)
    if len(unknown) > 1:
        raise ValueError(f"rearrange {text!r}: give sizes for all but one of {group.parts}")
    if unknown:
        if known == 0 or total % known:
            raise ValueError(
                f"rearrange {text!r}: cannot split size {total} into {group.parts} with sizes {sizes}"
            )
        sizes[unknown[0]] = total // known
    if math.prod(sizes) != total:
        raise ValueError(f"rearrange {text!r}: sizes {sizes} of {group.parts} do not multiply to {total}")
    return sizes


def _lhs_atoms(array: NamedArray, side, bindings, text: str):
    """Each axis of ``array`` as a list of (identifier, Axis) atoms; axes matched by '...' get None."""
    atoms: list[list[tuple[str | None, Axis]]] = [[(None, a)] for a in array.axes]

    def bind(position: int, capture):
        axis = array.axes[position]
        if isinstance(capture, Group):
            sizes = _split_sizes(capture, axis.size, bindings, text)
            atoms[position] = [
                (p, Axis(_bound_name(p, bindings), s)) for p, s in zip(capture.parts, sizes, strict=True)
            ]
        else:
            atoms[position] = [(capture, axis)]

    if side.ordered:
        caps = side.captures
        if Ellipsis in caps:
            head, tail = caps[: caps.index(Ellipsis)], caps[caps.index(Ellipsis) + 1 :]
            if len(head) + len(tail) > array.ndim:
                raise ValueError(
                    f"rearrange {text!r}: more captures than the {array.ndim} axes of {array.axes}"
                )
            positions = list(range(len(head))) + list(range(array.ndim - len(tail), array.ndim))
            caps = head + tail
        else:
            if len(caps) != array.ndim:
                raise ValueError(
                    f"rearrange {text!r}: {len(caps)} captures for the {array.ndim} axes {array.axes}"
                )
            positions = list(range(array.ndim))
        for position, capture in zip(positions, caps, strict=True):
            bind(position, capture)
    else:
        for capture in side.captures:
            if capture is Ellipsis:
                continue
            name = capture.name if isinstance(capture, Group) else capture
            if name is None:
                raise ValueError(f"rearrange {text!r}: a split inside {{}} needs a name, (name: a b)")
            bind(array.require_axis_indices(_bound_name(name, bindings)), capture)
    return atoms


def _place_rest(units: list, rest: list[int]) -> list:
    """The rhs units with each unmentioned atom placed in a ``...`` slot, by Haliax's partial-order rule
    (each unit sits where its first atom sat on the lhs; see ``rearrange_for_partial_order``)."""
    listed = [u for u in units if u is not Ellipsis] + [(None, [i]) for i in rest]
    keys = {f"#{k}": unit for k, unit in enumerate(listed)}
    partial, k = [], 0
    for u in units:
        if u is Ellipsis:
            partial.append(Ellipsis)
        else:
            partial.append(f"#{k}")
            k += 1
    by_position = sorted(keys, key=lambda key: min(keys[key][1]))
    return [keys[key] for key in rearrange_for_partial_order(tuple(partial), tuple(by_position))]


def rearrange_string(array: NamedArray, expression: str, **bindings) -> NamedArray:
    """Rearrange by an einops-style expression (see module docs).

    >>> import haliax_lite as hax
    >>> x = hax.zeros((hax.Axis("N", 6), hax.Axis("C", 3)))
    >>> hax.rearrange(x, "(step mb) c -> step mb c", step=2).shape
    {'step': 2, 'mb': 3, 'C': 3}
    """
    lhs_text, rhs_text = split_arrow(expression)
    lhs, rhs = parse_side(lhs_text, "lhs"), parse_side(rhs_text, "rhs", max_ellipses=None)
    if not rhs.ordered:
        raise ValueError(f"rearrange {expression!r}: the rhs cannot be unordered ({{}})")
    atoms = _lhs_atoms(array, lhs, bindings, expression)
    flat = [atom for group in atoms for atom in group]
    by_ident = {ident: i for i, (ident, _) in enumerate(flat) if ident is not None}
    used: set[int] = set()

    def take(ident: str) -> int:
        if ident not in by_ident:
            raise ValueError(f"rearrange {expression!r}: {ident!r} on the rhs is not bound on the lhs")
        if by_ident[ident] in used:
            raise ValueError(f"rearrange {expression!r}: {ident!r} is used twice on the rhs")
        used.add(by_ident[ident])
        return by_ident[ident]

    units: list = []  # (name or None, atom indices) per rhs capture; Ellipsis where the rhs has one
    for capture in rhs.captures:
        if isinstance(capture, Group):
            if capture.name is None:
                raise ValueError(
                    f"rearrange {expression!r}: merged axes need a name, (name: {' '.join(capture.parts)})"
                )
            units.append((capture.name, [take(p) for p in capture.parts]))
        elif capture is not Ellipsis:
            units.append((None, [take(capture)]))
        else:
            units.append(Ellipsis)
    rest = [i for i in range(len(flat)) if i not in used]
    if Ellipsis in units:
        out = _place_rest(units, rest)
    else:
        unused = [flat[i][0] for i in rest if flat[i][0] is not None]
        if unused:
            raise ValueError(
                f"rearrange {expression!r}: {unused} are bound on the lhs but missing from the rhs"
            )
        if rest:
            missing = [flat[i][1].name for i in rest]
            raise ValueError(
                f"rearrange {expression!r}: axes {missing} are not mentioned; add '...' to the rhs"
            )
        out = units
    split = array.array.reshape(tuple(a.size for _, a in flat))
    permuted = jnp.transpose(split, [i for _, idxs in out for i in idxs])
    new_axes = tuple(
        flat[idxs[0]][1]
        if name is None
        else Axis(_bound_name(name, bindings), math.prod(flat[i][1].size for i in idxs))
        for name, idxs in out
    )
    _check_no_duplicates(new_axes, f"the result of rearrange {expression!r}")
    return NamedArray(permuted.reshape(tuple(a.size for a in new_axes)), new_axes)
