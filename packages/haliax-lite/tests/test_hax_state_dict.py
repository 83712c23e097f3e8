"""State dicts: per-layer names for repeated layers, exact round trips, and errors that name the entry."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import haliax_lite as hax
from haliax_lite.state_dict import StateDictError, from_state_dict, iter_state_dict, to_state_dict


class Block(eqx.Module):
    proj: hax.nn.Linear
    norm: hax.nn.RmsNorm
    scale: jax.Array

    @staticmethod
    def init(Embed, Mlp, *, key):
        return Block(hax.nn.Linear.init(Embed, Mlp, key=key), hax.nn.RmsNorm.init(Embed), jnp.ones(2))


def stacked_model(layers: int, embed: int, mlp: int, seed: int = 0):
    Layers, Embed, Mlp = hax.Axis("layers", layers), hax.Axis("embed", embed), hax.Axis("mlp", mlp)
    keys = jax.random.split(jax.random.key(seed), layers)
    return {"layers": hax.nn.Stacked.init(Layers, Block)(Embed, Mlp, key=keys), "head": jnp.arange(3.0)}


@eqx.filter_jit  # one program per example: eagerly each init, slice and stack compiled for every drawn shape
def round_trip(layers, embed, mlp, seed):
    model = stacked_model(layers, embed, mlp, seed)
    flat = to_state_dict(model, "model")
    return model, flat, from_state_dict(model, flat, "model")


@given(layers=st.integers(1, 4), embed=st.integers(1, 5), mlp=st.integers(1, 5), seed=st.integers(0, 99))
def test_round_trip_is_exact_and_names_each_layer(layers, embed, mlp, seed):
    model, flat, back = round_trip(layers, embed, mlp, seed)
    per_layer = {"proj.weight", "proj.bias", "norm.weight", "norm.bias", "scale"}
    expected = {f"model.layers.{i}.{n}" for i in range(layers) for n in per_layer} | {"model.head"}
    assert set(flat) == expected
    weights = np.asarray(model["layers"].stacked.proj.weight.array)
    for i in range(layers):
        np.testing.assert_array_equal(flat[f"model.layers.{i}.proj.weight"], weights[i])
    for a, b in zip(jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(back), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert jax.tree_util.tree_structure(model) == jax.tree_util.tree_structure(back)


def test_stacked_and_blockseq_share_their_names():
    Layers, Embed, Mlp = hax.Axis("layers", 3), hax.Axis("embed", 2), hax.Axis("mlp", 4)
    keys = jax.random.split(jax.random.key(1), 3)
    stacked = hax.nn.Stacked.init(Layers, Block)(Embed, Mlp, key=keys)
    seq = hax.nn.BlockSeq.init(Layers, Block)(Embed, Mlp, key=keys)
    a, b = to_state_dict(stacked), to_state_dict(seq)
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    restored = from_state_dict(seq, a)
    np.testing.assert_array_equal(restored.blocks[2].proj.weight.array, seq.blocks[2].proj.weight.array)


def test_a_template_may_be_abstract():
    model = stacked_model(2, 3, 4)
    abstract = eqx.filter_eval_shape(lambda: model)
    back = from_state_dict(abstract, to_state_dict(model))
    weight = back["layers"].stacked.proj.weight
    np.testing.assert_array_equal(weight.array, model["layers"].stacked.proj.weight.array)


def test_named_slices_come_lazily_and_named():
    model = stacked_model(2, 3, 4)
    items = iter_state_dict(model)
    name, first = next(items)
    assert name == "head"
    name, weight = next(items)
    assert name == "layers.0.proj.weight"
    assert [a.name for a in weight.axes] == ["mlp", "embed"]
    assert next(items)[0] == "layers.1.proj.weight"


def test_a_missing_entry_is_named():
    model = stacked_model(2, 3, 4)
    flat = to_state_dict(model)
    del flat["layers.1.proj.weight"]
    with pytest.raises(StateDictError, match=r"^layers\.1\.proj\.weight: missing from the state dict$"):
        from_state_dict(model, flat)


def test_a_wrong_shape_names_the_entry_and_both_shapes():
    model = stacked_model(2, 3, 4)
    flat = to_state_dict(model)
    flat["layers.0.proj.weight"] = np.zeros((3, 4), np.float32)
    expected = r"^layers\.0\.proj\.weight: the state dict has shape \(3, 4\), the template needs \(4, 3\)$"
    with pytest.raises(StateDictError, match=expected):
        from_state_dict(model, flat)


def test_entries_are_read_once_from_a_lazy_mapping():
    model = stacked_model(2, 3, 4)
    flat = to_state_dict(model)
    reads = []

    class Lazy(dict):
        def __getitem__(self, key):
            reads.append(key)
            return super().__getitem__(key)

    from_state_dict(model, Lazy(flat))
    assert sorted(reads) == sorted(flat)


class Renamed(hax.state_dict.ModuleWithStateDictSerialization):
    """A module naming its own entries: ``scale`` is stored as ``weight``, ``inner``'s entries sit flat."""

    scale: hax.NamedArray
    inner: dict

    def _state_dict_key_map(self):
        return {"scale": "weight", "inner": None}

    @staticmethod
    def init(Embed, *, key):
        return Renamed(hax.random.normal(key, Embed), {"bias": hax.zeros(Embed)})


def test_a_module_names_its_entries_and_stacked_blocks_keep_those_names():
    Layers, Embed = hax.Axis("layers", 3), hax.Axis("embed", 2)
    stack = hax.nn.Stacked.init(Layers, Renamed)(Embed, key=jax.random.split(jax.random.key(2), 3))
    flat = to_state_dict({"m": stack})
    assert set(flat) == {f"m.{i}.{n}" for i in range(3) for n in ("weight", "bias")}
    np.testing.assert_array_equal(flat["m.2.weight"], stack.stacked.scale.array[2])
    back = from_state_dict({"m": stack}, flat)["m"]
    np.testing.assert_array_equal(back.stacked.scale.array, stack.stacked.scale.array)
    assert back.stacked.scale.axes == stack.stacked.scale.axes


def test_stacked_implements_the_protocol_itself():
    model = stacked_model(2, 3, 4)["layers"]
    assert isinstance(model, hax.state_dict.ModuleWithStateDictSerialization)
    direct, via_function = model.to_state_dict("x"), to_state_dict(model, "x")
    assert direct.keys() == via_function.keys()
    for name in direct:
        np.testing.assert_array_equal(direct[name], via_function[name])
    restored = model.from_state_dict(model.to_state_dict("x"), "x")
    np.testing.assert_array_equal(restored.stacked.proj.weight.array, model.stacked.proj.weight.array)


def test_blockseq_entries_sit_directly_under_the_prefix():
    Layers, Embed = hax.Axis("layers", 2), hax.Axis("embed", 2)
    seq = hax.nn.BlockSeq.init(Layers, Renamed)(Embed, key=jax.random.split(jax.random.key(3), 2))
    assert sorted(to_state_dict(seq, "b")) == ["b.0.bias", "b.0.weight", "b.1.bias", "b.1.weight"]


def test_scan_aware_tree_map_pairs_two_stacked_trees_block_by_block():
    a, b = stacked_model(2, 3, 4, seed=0), stacked_model(2, 3, 4, seed=1)
    summed = hax.tree_util.scan_aware_tree_map(
        lambda x, y: x + y if isinstance(x, hax.NamedArray) else x, a["layers"], b["layers"]
    )
    expected = a["layers"].stacked.proj.weight.array + b["layers"].stacked.proj.weight.array
    np.testing.assert_allclose(summed.stacked.proj.weight.array, expected)
