"""einops-style rearrange follows Haliax's rules for ``...``, unordered ``{...}`` captures, flattening and
unflattening (the cases of Haliax's own tests, checked for axes and values)."""

import jax
import numpy as np
import pytest

import haliax_lite as hax
from haliax_lite import Axis

W, H, C, D, B = Axis("W", 4), Axis("H", 6), Axis("C", 3), Axis("D", 2), Axis("B", 5)
Q, Z = Axis("Q", B.size * H.size), Axis("Z", B.size * C.size)
z = hax.random.randint(jax.random.PRNGKey(0), (B, D, H, W, C), 0, 255)
zq = hax.random.randint(jax.random.PRNGKey(0), (Q, D, W, C), 0, 255)
RAW, RAWQ = np.asarray(z.array), np.asarray(zq.array)
BDHWC = RAWQ.reshape(5, 6, 2, 4, 3).transpose(0, 2, 1, 3, 4)  # zq unflattened to (B, D, H, W, C)


@pytest.mark.parametrize(
    ("source", "equation", "bindings", "axes", "expected"),
    [
        (z, "... w c -> ... c w", {}, (B, D, H, C, W), RAW.transpose(0, 1, 2, 4, 3)),
        (z, "b d ... -> d ... b", {}, (D, H, W, C, B), RAW.transpose(1, 2, 3, 4, 0)),
        (z, "b ... c -> b c ...", {}, (B, C, D, H, W), RAW.transpose(0, 4, 1, 2, 3)),
        (z, "{W C} -> ... C W", {}, (B, D, H, C, W), RAW.transpose(0, 1, 2, 4, 3)),
        (z, "{B D} -> D ... B", {}, (D, H, W, C, B), RAW.transpose(1, 2, 3, 4, 0)),
        (z, "{qqq C} -> qqq C ...", {"qqq": B}, (B, C, D, H, W), RAW.transpose(0, 4, 1, 2, 3)),
        (
            z,
            "b d h ... c -> d (Q: b h) ... c",
            {},
            (D, Q, W, C),
            RAW.transpose(1, 0, 2, 3, 4).reshape(2, 30, 4, 3),
        ),
        (
            z,
            "{B D H ... C} -> D (Q: B H) ... C",
            {},
            (D, Q, W, C),
            RAW.transpose(1, 0, 2, 3, 4).reshape(2, 30, 4, 3),
        ),
        (zq, "(Q: B H) d, w c -> B d H w c", {"B": 5}, (B, D, H, W, C), BDHWC),
        (zq, "{ (Q: b H) D } -> b D H ... ", {"b": B}, (B, D, H, W, C), BDHWC),
        (
            zq,
            "{ W D C (Q: B H)} -> D (Z: B C) W H",
            {"H": H},
            (D, Z, W, H),
            BDHWC.transpose(1, 0, 4, 3, 2).reshape(2, 15, 4, 6),
        ),
    ],
)
def test_haliax_rearrange_cases(source, equation, bindings, axes, expected):
    out = hax.rearrange(source, equation, **bindings)
    assert out.axes == axes
    np.testing.assert_array_equal(np.asarray(out.array), expected)


@pytest.mark.parametrize(
    ("equation", "bindings", "message"),
    [
        ("b d h w c q -> b d h w c q", {}, "6 captures for the 5 axes"),
        ("b d h w c -> b d h w c q", {}, "'q' on the rhs is not bound on the lhs"),
        ("b d ... h w c ... -> b d h w c ...", {}, "At most one '...'"),
        ("b d c q z -> b d c z", {}, "missing from the rhs"),
        ("(x y) d c q z -> d c q x y z", {"x": 13, "y": 17}, "do not multiply"),
    ],
)
def test_haliax_rearrange_errors(equation, bindings, message):
    with pytest.raises(ValueError, match=message):
        hax.rearrange(z, equation, **bindings)
