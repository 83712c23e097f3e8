"""axis.replace_missing_with_ellipsis, as in Haliax: axes of ax1 that ax2 lacks become ``...``, names ax2
knows the size of become Axes, and a size conflict is an error."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite.axis import replace_missing_with_ellipsis

SIZES = {"a": 2, "b": 3, "c": 4, "d": 5}


@st.composite
def selections(draw):
    names = draw(st.permutations(sorted(SIZES)))[: draw(st.integers(0, 4))]
    return tuple(hax.Axis(n, SIZES[n]) if draw(st.booleans()) else n for n in names)


@given(selections(), selections())
def test_each_axis_is_kept_resolved_or_replaced_in_place(ax1, ax2):
    result = replace_missing_with_ellipsis(ax1, ax2)
    assert len(result) == len(ax1)
    known = {hax.axis_name(a): a for a in ax2}
    for original, out in zip(ax1, result, strict=True):
        other = known.get(hax.axis_name(original))
        if other is None:
            assert out is Ellipsis
        elif isinstance(original, hax.Axis) or isinstance(other, hax.Axis):
            assert out == hax.Axis(hax.axis_name(original), SIZES[hax.axis_name(original)])
        else:
            assert out == original


def test_examples_and_size_conflicts():
    A, B = hax.Axis("a", 2), hax.Axis("b", 3)
    assert replace_missing_with_ellipsis(("a", "b", "c"), (A, "b")) == (A, "b", Ellipsis)
    assert replace_missing_with_ellipsis((A, B), {"b": 3}) == (Ellipsis, B)
    assert replace_missing_with_ellipsis("a", ("a",)) == ("a",)
    with pytest.raises(ValueError, match="size 2"):
        replace_missing_with_ellipsis((A,), (hax.Axis("a", 7),))
