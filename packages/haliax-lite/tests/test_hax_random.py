"""haliax_lite.random draws exactly what jax.random draws for the same key, with names attached."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax

A, B = hax.Axis("a", 3), hax.Axis("b", 4)
KEY = jax.random.PRNGKey(0)


@pytest.mark.parametrize(
    ("named", "positional"),
    [
        (lambda: hax.random.normal(KEY, (A, B)), lambda: jax.random.normal(KEY, (3, 4))),
        (
            lambda: hax.random.uniform(KEY, (A, B), minval=-1.0, maxval=2.0),
            lambda: jax.random.uniform(KEY, (3, 4), minval=-1.0, maxval=2.0),
        ),
        (lambda: hax.random.bernoulli(KEY, (A, B), 0.3), lambda: jax.random.bernoulli(KEY, 0.3, (3, 4))),
        (lambda: hax.random.randint(KEY, (A, B), 0, 10), lambda: jax.random.randint(KEY, (3, 4), 0, 10)),
        (
            lambda: hax.random.truncated_normal(KEY, (A, B), -1.0, 1.0),
            lambda: jax.random.truncated_normal(KEY, -1.0, 1.0, (3, 4)),
        ),
        (lambda: hax.random.gumbel(KEY, (A, B)), lambda: jax.random.gumbel(KEY, (3, 4))),
        (lambda: hax.random.rademacher(KEY, (A, B)), lambda: jax.random.rademacher(KEY, (3, 4), dtype=int)),
    ],
)
def test_samplers_match_jax_random(named, positional):
    out = named()
    assert out.axes == (A, B)
    np.testing.assert_array_equal(np.asarray(out.array), np.asarray(positional()))


def test_named_parameters_broadcast_by_name():
    low = hax.arange(A, dtype=jnp.float32)
    out = hax.random.uniform(KEY, (B, A), minval=low, maxval=low + 0.5)
    assert out.axes == (B, A)
    raw = np.asarray(out.array)
    assert np.all(raw >= np.arange(3)) and np.all(raw < np.arange(3) + 0.5)
    p = hax.named(jnp.array([0.0, 1.0, 0.0]), A)
    assert np.asarray(hax.random.bernoulli(KEY, (A, B), p).array).tolist() == [
        [False] * 4,
        [True] * 4,
        [False] * 4,
    ]


def test_categorical_permutation_choice():
    logits = hax.named(jnp.array([[0.0, -1e9, -1e9, -1e9]] * 3), (A, B))
    assert hax.random.categorical(KEY, logits, "b").array.tolist() == [0, 0, 0]
    N = hax.Axis("n", 5)
    many = hax.random.categorical(KEY, logits, B, shape=(N, A))
    assert many.axes == (N, A)
    x = hax.arange((A, B))
    shuffled = hax.random.permutation(KEY, x, "a")
    assert shuffled.axes == x.axes
    assert sorted(np.asarray(shuffled.array)[:, 0].tolist()) == [0, 4, 8]
    Draw = hax.Axis("draw", 6)
    picked = hax.random.choice(KEY, Draw, x, "b", p=hax.named(jnp.array([0.0, 0.0, 1.0, 0.0]), B))
    assert picked.axes == (A, Draw) and np.all(np.asarray(picked.array) % 4 == 2)
    with pytest.raises(ValueError, match="Axis objects"):
        hax.random.normal(KEY, ("a",))
