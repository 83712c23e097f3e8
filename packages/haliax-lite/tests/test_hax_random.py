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


# a parameter named (b,) is broadcast by name: along the last dimension of (a, b), the first of (b, a)
ROW = jnp.array([0.5, 1.0, 2.0, 4.0])
NAMED_ROW = hax.named(ROW, "b")
PARAMETRISED = {
    "poisson": (dict(lam=NAMED_ROW), lambda k, r, s: jax.random.poisson(k, r, s)),
    "gamma": (dict(a=NAMED_ROW), lambda k, r, s: jax.random.gamma(k, r, s)),
    "loggamma": (dict(a=NAMED_ROW), lambda k, r, s: jax.random.loggamma(k, r, s)),
    "beta": (dict(a=NAMED_ROW, b=2.0), lambda k, r, s: jax.random.beta(k, r, 2.0, s)),
    "t": (dict(df=NAMED_ROW), lambda k, r, s: jax.random.t(k, r, s)),
    "weibull_min": (
        dict(scale=NAMED_ROW, concentration=1.5),
        lambda k, r, s: jax.random.weibull_min(k, r, 1.5, s),
    ),
    "pareto": (dict(b=NAMED_ROW), lambda k, r, s: jax.random.pareto(k, r, s)),
}


@pytest.mark.parametrize("name", sorted(PARAMETRISED))
def test_parametrised_distributions_broadcast_named_parameters_by_name(name):
    params, positional = PARAMETRISED[name]
    drawn = getattr(hax.random, name)(KEY, (A, B), **params)
    assert drawn.axes == (A, B)
    # The row placed by hand, as JAX places it (along the trailing dimension, or with an axis added): the
    # same draws as JAX's own broadcasting, and the program haliax's call compiled.
    np.testing.assert_array_equal(drawn.array, positional(KEY, jnp.broadcast_to(ROW, (3, 4)), (3, 4)))
    transposed = getattr(hax.random, name)(KEY, (B, A), **params)
    assert transposed.axes == (B, A)
    np.testing.assert_array_equal(
        transposed.array, positional(KEY, jnp.broadcast_to(ROW[:, None], (4, 3)), (4, 3))
    )


def test_ball_puts_the_dimension_last_and_stays_in_the_ball():
    D = hax.Axis("dim", 3)
    points = hax.random.ball(KEY, (A, B), D, p=1.0)
    assert points.axes == (A, B, D)
    np.testing.assert_array_equal(points.array, jax.random.ball(KEY, 3, p=1.0, shape=(3, 4)))
    assert bool((hax.sum(hax.abs(points), "dim") <= 1.0).all())
    with pytest.raises(ValueError, match="'a' is also in shape"):
        hax.random.ball(KEY, (A, B), A)
