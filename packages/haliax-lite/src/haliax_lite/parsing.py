"""Parser for the einops-style strings of ``rearrange`` and ``einsum``.

A side is a list of *captures*: an identifier, ``...``, or a parenthesized group ``(name: a b)`` /
``(a b)``; a side wrapped in ``{}`` is *unordered* (matched by name rather than position).
"""

from __future__ import annotations

import dataclasses
import re

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


def parse_side(text: str, what: str) -> Side:
    """Parse one side of an expression (commas count as spaces)."""
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
    if captures.count(Ellipsis) > 1:
        raise ValueError(f"At most one '...' in {what} {text!r}")
    return Side(tuple(captures), ordered)


def split_arrow(text: str) -> tuple[str, str]:
    if text.count("->") != 1:
        raise ValueError(f"Expected exactly one '->' in {text!r}")
    lhs, rhs = text.split("->")
    return lhs, rhs
