"""rearrange_for_partial_order (Haliax's greedy rule) and the axis-spec helpers; dot's out_axes uses it."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite.axis import (
    axis_spec_to_shape_dict,
    concat_axis_specs,
    rearrange_for_partial_order,
    resolve_axis,
)

NAMES = list("abcdef")


@st.composite
def partial_orders(draw):
    axes = tuple(draw(st.permutations(NAMES))[: draw(st.integers(1, 6))])
    listed = draw(st.lists(st.sampled_from(axes), unique=True))
    order = list(draw(st.permutations(listed)))
    for _ in range(draw(st.integers(1, 3))):
        order.insert(draw(st.integers(0, len(order))), ...)
    return axes, tuple(order)


@settings(max_examples=60)
@given(partial_orders())
def test_partial_order_is_respected_and_the_rest_keeps_its_order(case):
    axes, order = case
    out = rearrange_for_partial_order(order, axes)
    assert sorted(out) == sorted(axes)
    listed = [a for a in order if a is not ...]
    assert [a for a in out if a in listed] == listed
    assert [a for a in out if a not in listed] == [a for a in axes if a not in listed]


@pytest.mark.parametrize(
    ("order", "axes", "expected"),
    [
        (("c", ..., "a"), "abcd", "cbda"),
        (("a", ..., "c", ...), "cbad", "acbd"),
        ((..., "b", ...), "abc", "abc"),
        ((...,), "abc", "abc"),
        (("b", "a"), "ab", "ba"),
    ],
)
def test_partial_order_examples(order, axes, expected):
    assert rearrange_for_partial_order(order, tuple(axes)) == tuple(expected)


@pytest.mark.parametrize(
    ("order", "message"),
    [(("a",), "leaves out axes"), (("a", ..., "a"), "twice"), (("z", ...), "not in")],
)
def test_partial_order_errors(order, message):
    with pytest.raises(ValueError, match=message):
        rearrange_for_partial_order(order, ("a", "b"))


def test_dot_out_axes_accepts_any_partial_order():
    A, B, C, D = hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4), hax.Axis("d", 5)
    x = hax.arange((A, B, C, D), dtype=jnp.float32)
    w = hax.ones(D)
    default = hax.dot(x, w, axis=D)
    for order in [("c", ..., "a"), (..., "b", ...), (C, B, A), ("a", ..., "c", ...)]:
        out = hax.dot(x, w, axis=D, out_axes=order)
        assert out.axes == rearrange_for_partial_order(order, default.axes)
        np.testing.assert_allclose(np.asarray(out.rearrange(default.axes).array), np.asarray(default.array))
    with pytest.raises(ValueError, match="out_axes"):
        hax.dot(x, w, axis=D, out_axes=("a", "b"))


def test_axis_spec_helpers():
    A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    assert axis_spec_to_shape_dict((A, "b")) == {"a": 2, "b": None}
    assert concat_axis_specs({"a": 2}, {"b": 3}) == {"a": 2, "b": 3}
    assert concat_axis_specs(A, (B,)) == (A, B)
    with pytest.raises(ValueError, match="in both"):
        concat_axis_specs({"a": 2}, {"a": 2})
    assert resolve_axis((A, B), "b") == B and resolve_axis((A, B), ("b", A)) == (B, A)
    with pytest.raises(ValueError, match="'z' is not in"):
        resolve_axis((A, B), "z")
    assert hax.resolve_axis is resolve_axis and hax.concat_axis_specs is concat_axis_specs
