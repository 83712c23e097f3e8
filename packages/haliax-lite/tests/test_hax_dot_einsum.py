"""dot and einsum equal np.einsum over the same named axes, in every form; gradients match jax.grad."""

import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax

POOL = {n: hax.Axis(n, s) for n, s in zip("abcde", [2, 3, 1, 4, 2], strict=True)}


@st.composite
def operands(draw):
    n = draw(st.integers(1, 3))
    arrays = []
    for i in range(n):
        names = draw(st.lists(st.sampled_from(sorted(POOL)), min_size=0, max_size=3, unique=True))
        axes = tuple(POOL[k] for k in names)
        raw = np.random.default_rng(i).normal(size=[a.size for a in axes]).astype(np.float32)
        arrays.append(hax.NamedArray(jax.device_put(raw), axes))  # jnp.asarray compiles per shape
    return arrays


def _normal(axes, seed):
    raw = np.random.default_rng(seed).normal(size=[a.size for a in axes]).astype(np.float32)
    return hax.NamedArray(jax.device_put(raw), tuple(axes))


def _letters(axes):
    return "".join(string.ascii_lowercase[sorted(POOL).index(a.name)] for a in axes)


@settings(max_examples=30)
@given(operands(), st.data())
def test_dot_equals_einsum(arrays, data):
    present = sorted({a.name for x in arrays for a in x.axes})
    contracted = data.draw(st.lists(st.sampled_from(present), unique=True) if present else st.just([]))
    out = hax.dot(*arrays, axis=tuple(contracted))
    kept = []
    for x in arrays:
        kept.extend(a for a in x.axes if a.name not in contracted and a not in kept)
    assert out.axes == tuple(kept)
    spec = ",".join(_letters(x.axes) for x in arrays) + "->" + _letters(kept)
    expected = np.einsum(spec, *(np.asarray(x.array) for x in arrays))
    np.testing.assert_allclose(np.asarray(out.array), expected, rtol=1e-4, atol=1e-4)


def test_dot_axis_none_out_axes_and_precision():
    H, W, D, C = hax.Axis("H", 2), hax.Axis("W", 3), hax.Axis("D", 4), hax.Axis("C", 5)
    x, w = _normal((H, W, D, C), 0), _normal((D, C), 1)
    xs, ws = np.asarray(x.array), np.asarray(w.array)
    np.testing.assert_allclose(
        np.asarray(hax.dot(x, w, axis=None).array), np.einsum("hwdc,dc->", xs, ws), rtol=1e-4
    )
    y = hax.dot(x, w, axis=(D, C), out_axes=(W, H))
    assert y.axes == (W, H)
    np.testing.assert_allclose(np.asarray(y.array), np.einsum("hwdc,dc->wh", xs, ws), rtol=1e-4, atol=1e-5)
    z = hax.dot(x, w, axis=(), out_axes=(D, ..., H))
    assert z.axes == (D, W, C, H)
    low = hax.dot(x, w, axis=D, preferred_element_type=jnp.float32, precision=jax.lax.Precision.HIGHEST)
    assert low.dtype == jnp.float32


def test_dot_errors_name_the_axes():
    x = hax.ones((hax.Axis("a", 2), hax.Axis("b", 3)))
    with pytest.raises(ValueError, match=r"Contracted axes \['z'\]"):
        hax.dot(x, x, axis="z")
    with pytest.raises(ValueError, match="'b' has sizes 3 and 4"):
        hax.dot(x, hax.ones(hax.Axis("b", 4)), axis="b")
    with pytest.raises(ValueError, match="out_axes"):
        hax.dot(x, x, axis="b", out_axes=("b",))
    with pytest.raises(TypeError):
        hax.dot(x, np.ones(3), axis="b")


def test_grad_of_dot_equals_positional_grad():
    A, B, C = hax.Axis("a", 2), hax.Axis("b", 3), hax.Axis("c", 4)
    x, w = _normal((A, B), 0), _normal((C, B), 1)

    def named_loss(x, w):
        return hax.sum(hax.tanh(hax.dot(x, w, axis=B)) ** 2).scalar()

    def positional_loss(x, w):
        return jnp.sum(jnp.tanh(x @ w.T) ** 2)

    gx, gw = jax.grad(named_loss, argnums=(0, 1))(x, w)
    px, pw = jax.grad(positional_loss, argnums=(0, 1))(x.array, w.array)
    assert gx.axes == x.axes and gw.axes == w.axes
    np.testing.assert_allclose(np.asarray(gx.array), np.asarray(px), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gw.array), np.asarray(pw), rtol=1e-5)


H, W, D = hax.Axis("H", 2), hax.Axis("W", 3), hax.Axis("D", 4)


@pytest.fixture
def xw():
    return _normal((H, W, D), 0), _normal((D,), 1)


@pytest.mark.parametrize(
    ("equation", "aliases", "spec", "axes"),
    [
        ("h w d, d -> h w", {}, "hwd,d->hw", (H, W)),
        ("... d, d -> ...", {}, "hwd,d->hw", (H, W)),
        ("h w d, d -> w h", {}, "hwd,d->wh", (W, H)),
        ("{H W D} -> H W", {}, "hwd,d->hw", (H, W)),
        ("{D} -> ", {}, "hwd,d->hw", (H, W)),
        ("{...} -> ", {}, "hwd,d->", ()),
        ("{H ...} -> H", {}, "hwd,d->h", (H,)),
        ("{H ...} -> ...", {}, "hwd,d->hwd", (H, W, D)),  # as Haliax: a rhs '...' keeps every axis
        ("{X} -> ", {"X": D}, "hwd,d->hw", (H, W)),
        ("-> H W", {}, "hwd,d->hw", (H, W)),
        ("-> D", {}, "hwd,d->d", (D,)),
        ("-> height", {"height": "H"}, "hwd,d->h", (H,)),
    ],
)
def test_einsum_forms(xw, equation, aliases, spec, axes):
    x, w = xw
    out = hax.einsum(equation, x, w, **aliases)
    assert out.axes == axes
    expected = np.einsum(spec, np.asarray(x.array), np.asarray(w.array))
    np.testing.assert_allclose(np.asarray(out.array), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("equation", "message"),
    [
        ("h w, d -> h", "labels"),
        ("h w d, h -> h", "names both"),
        ("h w d, d -> q", "not on the lhs"),
        ("{Q} -> ", "Axis Q not present"),
        ("h w d, d", "exactly one '->'"),
        ("h w d d d, d -> h", "labels"),
        ("h w (d), d -> h", "groups"),
        ("h w d, d -> h h", "twice"),
    ],
)
def test_einsum_errors(xw, equation, message):
    with pytest.raises(ValueError, match=message):
        hax.einsum(equation, *xw)


@settings(max_examples=30)
@given(operands(), st.data(), st.sampled_from(["ordered", "unordered", "output"]))
def test_einsum_forms_equal_numpy_einsum(arrays, data, form):
    present = sorted({a.name for x in arrays for a in x.axes})
    out_names = data.draw(st.permutations(present)) if present else []
    out_names = out_names[: data.draw(st.integers(0, len(out_names)))]
    if form == "ordered":  # labels differ from the axis names: they bind by position
        lhs = ", ".join(" ".join(f"l{a.name}" for a in x.axes) for x in arrays)
        equation = f"{lhs} -> {' '.join(f'l{n}' for n in out_names)}"
    elif form == "unordered":
        equation = "{" + " ".join(present) + "} -> " + " ".join(out_names)
    else:
        equation = "-> " + " ".join(out_names)
    out = hax.einsum(equation, *arrays)
    assert [a.name for a in out.axes] == out_names
    spec = ",".join(_letters(x.axes) for x in arrays) + "->" + _letters([POOL[n] for n in out_names])
    expected = np.einsum(spec, *(np.asarray(x.array) for x in arrays))
    np.testing.assert_allclose(np.asarray(out.array), expected, rtol=1e-4, atol=1e-4)
