"""einsum's three forms and rearrange's ellipses, value-checked against jnp.einsum / transpose (the cases
Haliax documents: positional aliases, unordered ellipses, output-only specs, several ellipses)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax

H, W, D = hax.Axis("Height", 2), hax.Axis("Width", 3), hax.Axis("Depth", 4)
M1 = hax.random.normal(jax.random.PRNGKey(0), (H, W, D))
M2 = hax.random.normal(jax.random.PRNGKey(1), (D, W, H))
M3 = hax.random.normal(jax.random.PRNGKey(2), (H, D))

# (equation, aliases, jnp equation on M1 and M2)
CASES = [
    ("i j k,k j i-> j k", {}, "ijk,kji->jk"),
    ("i j k,k j i->", {}, "ijk,kji->"),
    ("i j k,k j i-> j k", {"i": H}, "ijk,kji->jk"),
    ("h ... d,d ... h-> ...", {}, "ijk,kji->j"),
    ("h ... d,d ... h-> ... d", {}, "ijk,kji->jk"),
    ("{Height Width Depth} -> Height Width", {}, "ijk,kji->ij"),
    ("{Height Depth} -> ", {}, "ijk,kji->j"),
    ("{} ->", {}, "ijk,kji->ijk"),
    ("{...} ->", {}, "ijk,kji->"),
    ("{...} -> ...", {}, "ijk,kji->ijk"),
    ("{} -> ...", {}, "ijk,kji->ijk"),
    ("{Depth} -> Depth ...", {}, "ijk,kji->kij"),
    ("{Depth Height} -> Depth ... Height", {}, "ijk,kji->kji"),
    ("{Depth} -> ... Depth ...", {}, "ijk,kji->ijk"),
    ("{h w d} -> h w", {"h": H, "w": W, "d": D}, "ijk,kji->ij"),
    (" -> Height Width", {}, "ijk,kji->ij"),
    ("-> Depth", {}, "ijk,kji->k"),
    ("-> ...", {}, "ijk,kji->ijk"),
    ("-> ... Width", {}, "ijk,kji->ikj"),
    ("-> Depth ... Width", {}, "ijk,kji->kij"),
    ("-> h w", {"h": H, "w": W}, "ijk,kji->ij"),
]


@pytest.mark.parametrize(("equation", "aliases", "positional"), CASES)
def test_einsum_matches_jnp_einsum(equation, aliases, positional):
    out = hax.einsum(equation, M1, M2, **aliases)
    np.testing.assert_allclose(out.array, jnp.einsum(positional, M1.array, M2.array), rtol=1e-5, atol=1e-5)


def test_output_only_contracts_over_several_arrays():
    out = hax.einsum("-> h w", M1, M3, h=H, w=W)
    np.testing.assert_allclose(out.array, jnp.einsum("ijk,ik->ij", M1.array, M3.array), rtol=1e-5)


@pytest.mark.parametrize(
    ("equation", "aliases", "message"),
    [
        ("i j k,k j i-> j k", {"i": W}, r"label 'i' is aliased to 'Width', but operand 0 has 'Height'"),
        (
            "i j k,q j i-> j k",
            {"i": H, "q": H},
            r"label 'q' is aliased to 'Height', but operand 1 has 'Depth'",
        ),
        ("i j k,k j i-> j k", {"i": H, "q": H}, r"Axis alias q not used"),
        ("{h w d} -> h w", {"h": H, "w": W}, r"Axis d not present"),
        ("{h w} -> h w", {"h": H, "w": W, "d": D}, r"Axis alias d not used"),
        ("-> Height Width", {"Q": hax.Axis("Q", 2)}, r"Unused aliases from kwargs: Q$"),
        ("-> h w", {"h": H.resize(4), "w": W}, r"Size mismatch for 'h'"),
        ("-> Q Width", {}, r"Axis Q not present: not found in any of the input arrays"),
        ("{Height} {Width} ->", {}, r"Cannot have multiple unordered axes"),
    ],
)
def test_einsum_errors_name_the_offending_axis_or_alias(equation, aliases, message):
    with pytest.raises(ValueError, match=message):
        hax.einsum(equation, M1, M2, **aliases)


B, C = hax.Axis("B", 2), hax.Axis("C", 6)
Dz, Hz, Wz = hax.Axis("D", 3), hax.Axis("H", 4), hax.Axis("W", 5)
Z = hax.arange((B, Dz, Hz, Wz, C))
Q = hax.Axis("Q", 8)


def _positions(axes):
    return [[a.name for a in Z.axes].index(a.name) for a in axes]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("b d h w c -> d ... c ... h", (Dz, B, C, Wz, Hz)),
        ("b d h w c -> d ... (BB: b) ... w", (Dz, B.alias("BB"), Hz, C, Wz)),
        ("... w c -> ... c w", (B, Dz, Hz, C, Wz)),
        ("{W C} -> ... C W", (B, Dz, Hz, C, Wz)),
        ("b d ... -> d ... b", (Dz, Hz, Wz, C, B)),
    ],
)
def test_rearrange_places_unlisted_axes_in_several_ellipses(expression, expected):
    out = hax.rearrange(Z, expression)
    assert out.axes == expected
    source = [a if a.name != "BB" else B for a in expected]
    np.testing.assert_array_equal(out.array, jnp.transpose(Z.array, _positions(source)))


# (expression, axes, positional equivalent: a transpose of Z then a reshape)
GROUPED = [
    ("b d h w c -> d ... (Q: b h) ... w", (Dz, Q, C, Wz), (1, 0, 2, 4, 3)),
    ("{B H} -> ... (Q: B H) ...", (Q, Dz, Wz, C), (0, 2, 1, 3, 4)),
    ("{B H W} -> ... (Q: B H) ... W", (Q, Dz, C, Wz), (0, 2, 1, 4, 3)),
    ("{H W D} -> ... (E: H W D) ...", (B, hax.Axis("E", 60), C), (0, 2, 3, 1, 4)),
]


@pytest.mark.parametrize(("expression", "expected", "permutation"), GROUPED)
def test_merged_groups_sit_among_several_ellipses_as_haliax_places_them(expression, expected, permutation):
    out = hax.rearrange(Z, expression)
    assert out.axes == expected
    positional = jnp.transpose(Z.array, permutation).reshape(tuple(a.size for a in expected))
    np.testing.assert_array_equal(out.array, positional)


def test_the_sequence_form_takes_several_ellipses():
    x = hax.zeros(hax.make_axes(a=1, b=2, c=3, d=4))
    assert [a.name for a in hax.rearrange(x, ("c", ..., "a", ...)).axes] == ["c", "a", "b", "d"]
    assert [a.name for a in hax.rearrange(x, (..., "b", ...)).axes] == ["a", "b", "c", "d"]


def test_rearrange_errors_name_the_axis():
    with pytest.raises(ValueError, match=r"Axis 'q' not found in array with axes"):
        hax.rearrange(Z, "{q} -> q")
    with pytest.raises(ValueError, match=r"\['w'\] are bound on the lhs but missing from the rhs"):
        hax.rearrange(Z, "b d h w c -> b d h c")
