"""Named, NamedArrayAxes and NamedArrayAxesSpec: specs parse as Haliax parses them, ``Named[...]`` is an
``Annotated`` NamedArray, and ``matches_axes`` (and ``isinstance`` with ``NamedArray[...]``) agree with a
direct reading of the spec for random axis orders."""

import typing

import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite import Named, NamedArrayAxes

POOL = [hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4), hax.Axis("d", 1)]


def test_specs_parse_into_haliax_named_array_axes():
    assert hax.haxtyping.parse_axes_spec("a b") == NamedArrayAxes(("a", "b"))
    assert hax.haxtyping.parse_axes_spec("a ... c") == NamedArrayAxes(("a",), ("c",), subset=True)
    assert hax.haxtyping.parse_axes_spec(("a", ..., "c")) == NamedArrayAxes(("a",), ("c",), subset=True)
    assert hax.haxtyping.parse_axes_spec(["a", "b"]) == NamedArrayAxes(("a", "b"))
    assert hax.haxtyping.parse_axes_spec({"b", "a", ...}) == NamedArrayAxes(
        ("a", "b"), ordered=False, subset=True
    )
    assert hax.haxtyping.parse_axes_spec("{b a}") == NamedArrayAxes(("a", "b"), ordered=False)
    for bad in ("a ... b ...", ("a", 1), {"a", 2}, 3, "{a b"):
        with pytest.raises(TypeError):
            hax.haxtyping.parse_axes_spec(bad)


def test_named_is_annotated_named_array_with_the_axes():
    annotation = Named[hax.NamedArray, "batch ... embed"]
    assert typing.get_origin(annotation) is typing.Annotated
    base, spec = typing.get_args(annotation)
    assert base is hax.NamedArray and spec == NamedArrayAxes(("batch",), ("embed",), subset=True)
    assert Named["batch embed"] == Named[hax.NamedArray, ("batch", "embed")]

    BatchEmbed = Named[hax.NamedArray, {"batch", "embed"}]
    Batch = Named[hax.NamedArray, "batch"]

    def f(x: BatchEmbed) -> Batch: ...

    hints = typing.get_type_hints(f, include_extras=True)
    x = hax.zeros((hax.Axis("embed", 2), hax.Axis("batch", 3)))
    assert x.matches_axes(hints["x"]) and not x.matches_axes(hints["return"])
    assert repr(spec) == "NamedArray[batch ... embed]"


def test_dtype_in_a_spec_is_checked():
    x = hax.zeros(hax.Axis("a", 2), dtype=jnp.float32)
    assert x.matches_axes(NamedArrayAxes(("a",), dtype=jnp.float32))
    assert x.matches_axes(NamedArrayAxes(("a",), dtype=jnp.floating))
    assert not x.matches_axes(NamedArrayAxes(("a",), dtype=jnp.integer))
    assert not x.matches_axes(NamedArrayAxes(("a",), dtype=jnp.bfloat16))


def reference(names, spec) -> bool:
    """What a spec string of the form used below means, read directly."""
    tokens = spec.split()
    if tokens[0] == "{":
        wanted = [t for t in tokens[1:-1] if t != "..."]
        return set(wanted) <= set(names) and ("..." in tokens or len(wanted) == len(names))
    if "..." not in tokens:
        return list(names) == tokens
    i = tokens.index("...")
    head, tail = tokens[:i], tokens[i + 1 :]
    return (
        len(names) >= len(head) + len(tail)
        and list(names[: len(head)]) == head
        and (not tail or list(names[len(names) - len(tail) :]) == tail)
    )


@st.composite
def specs(draw):
    names = draw(st.permutations([a.name for a in POOL]))[: draw(st.integers(0, 3))]
    kind = draw(st.sampled_from(["exact", "ellipsis", "set", "set..."]))
    if kind == "exact":
        return " ".join(names) or "..."
    if kind == "ellipsis":
        cut = draw(st.integers(0, len(names)))
        return " ".join([*names[:cut], "...", *names[cut:]])
    return "{ " + " ".join([*names, *(["..."] if kind == "set..." else [])]) + " }"


@given(st.permutations(POOL), st.integers(0, 4), specs())
def test_matches_axes_and_isinstance_agree_with_the_spec(order, n, spec):
    x = hax.zeros(tuple(order[:n]))
    names = [a.name for a in x.axes]
    expected = reference(names, spec)
    assert x.matches_axes(spec) == expected
    assert isinstance(x, hax.NamedArray[spec]) == expected
    assert x.matches_axes(Named[hax.NamedArray, spec]) == expected
