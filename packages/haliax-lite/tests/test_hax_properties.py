"""Property tests over random axis sets: shape ops and indexing equal numpy, and gradients of named programs
equal jax.grad of the positional program they mean."""

import string

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import haliax_lite as hax


@st.composite
def named_arrays(draw, min_axes=1, max_axes=4, dtypes=(np.float32, np.int32)):
    names = draw(st.lists(st.sampled_from("pqrstu"), min_size=min_axes, max_size=max_axes, unique=True))
    axes = tuple(hax.Axis(n, draw(st.integers(1, 4))) for n in names)
    dtype = draw(st.sampled_from(dtypes))
    raw = np.random.default_rng(draw(st.integers(0, 1000))).normal(size=[a.size for a in axes]) * 4
    # device_put, not jnp.asarray: the latter compiles a program (jit(stage)) for every drawn shape
    return hax.NamedArray(jax.device_put(raw.astype(dtype)), axes), raw.astype(dtype)


@settings(max_examples=30)
@given(named_arrays(min_axes=2), st.data())
def test_flatten_then_unflatten_is_a_reshape_round_trip(xr, data):
    x, raw = xr
    count = data.draw(st.integers(2, x.ndim))
    merged = data.draw(st.permutations(x.axes))[:count]

    @jax.jit  # one program per example: eagerly each transpose and reshape compiled for every drawn shape
    def round_trip(x):
        flat = hax.flatten_axes(x, merged, "merged")
        return flat, hax.rearrange(hax.unflatten_axis(flat, "merged", merged), x.axes)

    flat, restored = round_trip(x)
    rest = [a for a in x.axes if a not in merged]
    position = min(x.axes.index(a) for a in merged)
    before = [a for a in rest if x.axes.index(a) < position]
    order = [x.axes.index(a) for a in [*before, *merged, *rest[len(before) :]]]
    after = rest[len(before) :]
    expected = raw.transpose(order).reshape([a.size for a in before] + [-1] + [a.size for a in after])
    np.testing.assert_array_equal(np.asarray(flat.array), expected)
    np.testing.assert_array_equal(np.asarray(restored.array), raw)


@settings(max_examples=30)
@given(named_arrays(), st.data())
def test_split_then_concatenate_is_the_identity(xr, data):
    x, raw = xr
    axis = data.draw(st.sampled_from(x.axes))
    cut = data.draw(st.integers(0, axis.size))

    @jax.jit  # one program per example: eagerly split and concatenate compiled for every drawn shape
    def split_and_rejoin(x):
        parts = hax.split(x, axis, [axis.resize(cut), axis.resize(axis.size - cut)])
        return parts, hax.concatenate(axis.name, parts)

    parts, rejoined = split_and_rejoin(x)
    i = x.axes.index(axis)
    np.testing.assert_array_equal(np.asarray(parts[0].array), np.take(raw, range(cut), axis=i))
    np.testing.assert_array_equal(np.asarray(rejoined.array), raw)


@settings(max_examples=40)
@given(named_arrays(), st.data())
def test_named_indexing_equals_positional_indexing(xr, data):
    x, raw = xr
    chosen = data.draw(st.lists(st.sampled_from(x.axes), unique=True, min_size=1))
    index, positional = {}, [slice(None)] * x.ndim
    for a in chosen:
        kind = data.draw(st.sampled_from(["int", "slice"]))
        if kind == "int":
            i = data.draw(st.integers(0, a.size - 1))
        else:
            start = data.draw(st.integers(0, a.size))
            i = slice(start, data.draw(st.integers(start, a.size)))
        index[a.name] = positional[x.axes.index(a)] = i
    out = x[index]
    expected = raw[tuple(positional)]
    np.testing.assert_array_equal(np.asarray(out.array if isinstance(out, hax.NamedArray) else out), expected)
    if isinstance(out, hax.NamedArray):
        kept = [a.name for a in x.axes if not isinstance(index.get(a.name), int)]
        assert [a.name for a in out.axes] == kept


@settings(max_examples=20)
@given(named_arrays(min_axes=2, max_axes=3, dtypes=(np.float32,)), st.data())
def test_gradients_of_named_programs_equal_positional_gradients(xr, data):
    x, raw = xr
    contracted = data.draw(st.sampled_from(x.axes))
    reduced = data.draw(st.sampled_from([a for a in x.axes if a != contracted]))
    Out = hax.Axis("out", 3)
    w_raw = np.random.default_rng(1).normal(size=(contracted.size, 3)).astype(np.float32)
    w = hax.NamedArray(jax.device_put(w_raw), (contracted, Out))

    def named(x, w):
        h = hax.tanh(hax.dot(x, w, axis=contracted)) * hax.mean(hax.sin(x), axis=contracted)
        return hax.sum(hax.logsumexp(h, axis=reduced) ** 2).scalar()

    letters = "".join(string.ascii_lowercase[i] for i in range(x.ndim))
    c, r = letters[x.axes.index(contracted)], letters[x.axes.index(reduced)]
    kept = letters.replace(c, "")

    def positional(xa, wa):
        h = (
            jnp.tanh(jnp.einsum(f"{letters},{c}z->{kept}z", xa, wa))
            * jnp.mean(jnp.sin(xa), axis=letters.index(c))[..., None]
        )
        return jnp.sum(jax.nn.logsumexp(h, axis=kept.index(r)) ** 2)

    # Compiled, as a training step takes gradients: both in one program per example, not one per operation.
    @jax.jit
    def gradients(x, w, raw, w_raw):
        return jax.grad(named, argnums=(0, 1))(x, w), jax.grad(positional, argnums=(0, 1))(raw, w_raw)

    (gx, gw), (px, pw) = gradients(x, w, raw, w_raw)
    np.testing.assert_allclose(np.asarray(gx.array), np.asarray(px), rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gw.array), np.asarray(pw), rtol=2e-4, atol=1e-5)
