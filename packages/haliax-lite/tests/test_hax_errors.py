"""Every bad input a user can give gets an error that says what is wrong and where."""

import jax
import jax.numpy as jnp
import pytest

import haliax_lite as hax

A, B = hax.Axis("a", 2), hax.Axis("b", 3)
X = hax.ones((A, B))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: hax.stack(hax.Axis("s", 3), [X, X]), ValueError, "does not match the 2 arrays"),
        (lambda: hax.stack("a", [X]), ValueError, "already in the arrays' axes"),
        (lambda: hax.stack("s", []), ValueError, "at least one"),
        (lambda: hax.concatenate(hax.Axis("a", 3), [X, X]), ValueError, "total size 4"),
        (lambda: hax.concatenate("a", [X, hax.ones((A, B.resize(4)))]), ValueError, "'b' has sizes 3 and 4"),
        (lambda: hax.concatenate("z", [X]), ValueError, "'z' not found"),
        (lambda: hax.linspace("a", start=0.0, stop=1.0), ValueError, "Axis objects"),
        (lambda: hax.arange("a"), ValueError, "Axis objects"),
        (lambda: hax.rename(X, {"a": "b"}), ValueError, "Duplicate axis names"),
        (lambda: hax.rename(X, {"a": hax.Axis("c", 5)}), ValueError, "does not match the size"),
        (lambda: hax.rename(X, {"z": "c"}), ValueError, "'z' not found"),
        (lambda: hax.flatten_axes(X, (), "c"), ValueError, "at least one axis"),
        (lambda: hax.flatten_axes(X, ("a", "b"), hax.Axis("ab", 5)), ValueError, "merged size 6"),
        (lambda: hax.rearrange(X, ("a",)), ValueError, r"\['b'\].*are missing"),
        (lambda: hax.rearrange(X, ("a", "a")), ValueError, r"Duplicate axis names \[.a.\] in rearrange"),
        (lambda: hax.where(X > 0, X), ValueError, "both x and y"),
        (lambda: hax.where(X > 0), ValueError, "fill_value and new_axis"),
        (lambda: hax.slice(X, "a", start=0), ValueError, "needs length"),
        (lambda: hax.sum(jnp.ones(3), "a"), TypeError, "names an axis, but the array is not a NamedArray"),
        (lambda: hax.random.choice(jax.random.PRNGKey(0), B, X, "a", p=X), ValueError, "p must have only"),
        (lambda: hax.scan(lambda c, x: (c, x), "t")(0, 1.0), ValueError, "Cannot infer the size of axis 't'"),
        (lambda: hax.broadcast_to(jnp.ones(3), (A,)), ValueError, "NamedArray or a scalar"),
        (lambda: hax.NamedArray(jnp.ones(2), A).scalar(), ValueError, "no axes"),
        (lambda: iter(X), TypeError, "unbind"),
        (lambda: hax.unflatten_axis(X, "b", ("x", "y")), ValueError, "Axis objects"),
        (lambda: hax.roll(X, (1, 2), "a"), ValueError, "2 shifts for 1 axes"),
        (lambda: hax.einsum("a b -> a", X, X), ValueError, "1 operand specs for 2 arrays"),
        (lambda: hax.axis_size("a"), ValueError, "Axis objects"),
    ],
)
def test_bad_input_is_reported_clearly(call, error, message):
    with pytest.raises(error, match=message):
        call()
