"""Mistakes a new user makes with the layers get an error that says what to do; dict axis specs work."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax

Embed, Mlp, Layers = hax.Axis("embed", 4), hax.Axis("mlp", 8), hax.Axis("layers", 3)


def test_linear_with_dict_axis_specs_equals_the_one_with_axes():
    key = jax.random.PRNGKey(0)
    by_dict = hax.nn.Linear.init({"embed": 4}, {"mlp": 8}, key=key)
    by_axis = hax.nn.Linear.init(Embed, Mlp, key=key)
    x = hax.random.normal(jax.random.PRNGKey(1), (hax.Axis("batch", 2), Embed))
    out = by_dict(x)
    assert out.axes == by_axis(x).axes
    np.testing.assert_allclose(np.asarray(out.array), np.asarray(by_axis(x).array), rtol=1e-6)
    assert jax.jit(lambda m, x: m(x))(by_dict, x).axes == out.axes  # the spec is a hashable static field
    assert by_dict.out_first


def test_linear_with_the_same_axis_in_and_out_says_how_to_rename():
    with pytest.raises(
        ValueError, match=r"In and Out share the axis names \['embed'\].*alias\('embed_out'\)"
    ):
        hax.nn.Linear.init(Embed, Embed, key=jax.random.PRNGKey(0))
    layer = hax.nn.Linear.init(Embed, Embed.alias("embed_out"), key=jax.random.PRNGKey(0))
    assert layer(hax.ones(Embed)).axes == (Embed.alias("embed_out"),)


class _Residual(eqx.Module):
    """A block that returns only the new carry (so it suits fold, not scan)."""

    linear: hax.nn.Linear

    @staticmethod
    def init(*, key):
        return _Residual(hax.nn.Linear.init(Embed, Embed.alias("embed_out"), key=key))

    def __call__(self, x):
        return self.linear(x).rename({"embed_out": "embed"}) + x


def _stack():
    keys = jax.random.split(jax.random.PRNGKey(0), Layers.size)
    return hax.nn.Stacked.init(Layers, _Residual)(key=keys)


def test_stacked_scan_with_a_block_returning_one_value_points_to_fold():
    stack = _stack()
    with pytest.raises(
        TypeError, match=r"Stacked.scan: _Residual.__call__ returned NamedArray.*use Stacked.fold"
    ):
        stack.scan(hax.ones(Embed))
    assert stack.fold(hax.ones(Embed)).axes == (Embed,)


@pytest.mark.parametrize("key", [jax.random.PRNGKey(0), jax.random.key(0)], ids=["raw", "typed"])
def test_stacked_init_with_an_unsplit_key_says_to_split_it(key):
    with pytest.raises(ValueError, match=r"one PRNG key as key=.*key=jax.random.split\(key, 3\)"):
        hax.nn.Stacked.init(Layers, hax.nn.Linear)(Embed, Mlp, key=key)
    split = jax.random.split(key, Layers.size)
    stack = hax.nn.Stacked.init(Layers, hax.nn.Linear)(Embed, Mlp, key=split)
    assert stack.stacked.weight.axes[0] == Layers


def test_a_two_element_key_array_for_two_layers_is_still_an_unsplit_key():
    Two = hax.Axis("layers", 2)
    with pytest.raises(ValueError, match="split"):
        hax.nn.Stacked.init(Two, hax.nn.Linear)(Embed, Mlp, key=jnp.asarray([0, 1], dtype=jnp.uint32))
