"""Haliax's state-dict export API: PyTorch layouts (multi-axis Linear flattened, per-layer names for
Stacked), NumPy host copies, and safetensors files, each round-tripping exactly."""

import equinox as eqx
import jax
import numpy as np
import pytest

import haliax_lite as hax
from haliax_lite import state_dict as sd

Layers, Embed = hax.Axis("layers", 2), hax.Axis("embed", 4)
Heads, Size = hax.Axis("heads", 2), hax.Axis("head_size", 3)


class Attn(eqx.Module):
    q: hax.nn.Linear
    o: hax.nn.Linear

    @staticmethod
    def init(*, key):
        k1, k2 = jax.random.split(key)
        return Attn(
            hax.nn.Linear.init(Embed, (Heads, Size), key=k1),
            hax.nn.Linear.init((Heads, Size), Embed.alias("embed_out"), key=k2, out_first=False),
        )


def model():
    stack = hax.nn.Stacked.init(Layers, Attn)(key=jax.random.split(jax.random.PRNGKey(0), Layers.size))
    return {"blocks": stack, "norm": hax.ones(Embed)}


def test_torch_layout_flattens_multi_axis_linears_per_layer():
    m = model()
    flat = sd.to_torch_compatible_state_dict(m, prefix="model")
    assert sorted(flat) == sorted(
        [f"model.blocks.{i}.{p}.{w}" for i in range(2) for p in ("q", "o") for w in ("weight", "bias")]
        + ["model.norm"]
    )
    assert all(isinstance(v, np.ndarray) for v in flat.values())
    q = m["blocks"].stacked.q.weight  # (layers, heads, head_size, embed)
    assert flat["model.blocks.1.q.weight"].shape == (6, 4)
    np.testing.assert_array_equal(flat["model.blocks.1.q.weight"], np.asarray(q.array[1]).reshape(6, 4))
    o = m["blocks"].stacked.o.weight  # in first: (layers, heads, head_size, embed_out) -> (6, 4)
    np.testing.assert_array_equal(flat["model.blocks.0.o.weight"], np.asarray(o.array[0]).reshape(6, 4))
    np.testing.assert_array_equal(
        flat["model.blocks.0.q.bias"], np.asarray(m["blocks"].stacked.q.bias.array[0]).reshape(6)
    )


def test_torch_layout_round_trips_into_an_abstract_template():
    m = model()
    flat = sd.to_torch_compatible_state_dict(m)
    back = sd.from_torch_compatible_state_dict(eqx.filter_eval_shape(model), flat)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(m)
    for a, b in zip(jax.tree_util.tree_leaves(m), jax.tree_util.tree_leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert back["blocks"].stacked.q.weight.axes == m["blocks"].stacked.q.weight.axes


def test_flattening_is_undone_by_unflattening():
    m = model()
    flat = sd.flatten_modules_for_export(m)
    assert flat["blocks"].stacked.q.weight.axes == (Layers, hax.Axis("__OUT__", 6), hax.Axis("__IN__", 4))
    back = sd.unflatten_modules_from_export(flat, m)
    np.testing.assert_array_equal(back["blocks"].stacked.q.weight.array, m["blocks"].stacked.q.weight.array)


def test_safetensors_files_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    flat = sd.to_torch_compatible_state_dict(model())
    path = tmp_path / "model.safetensors"
    sd.save_state_dict({**flat, "absent": None}, path)
    loaded = sd.load_state_dict(path)
    assert sorted(loaded) == sorted(flat)
    for name, value in flat.items():
        np.testing.assert_array_equal(loaded[name], value)
    import safetensors

    with safetensors.safe_open(str(path), "np") as f:
        assert f.metadata() == {"format": "pt"}


def test_numpy_state_dicts_and_prefixes():
    flat = sd.to_numpy_state_dict({"w": hax.ones(Embed)}, prefix="m")
    assert list(flat) == ["m.w"] and isinstance(flat["m.w"], np.ndarray)
    assert (
        sd.with_prefix("a", "b") == "a.b"
        and sd.with_prefix(None, "b") == "b"
        and sd.with_prefix("a", None) == "a"
    )
    assert sd.StateDict == dict[str, object] or sd.StateDict.__origin__ is dict
