"""hax.debug: diagnose_common_issues finds reused and static arrays (and passes a clean model), and
visualize_shardings prints each array's axes and mesh axes, outside jit and inside it (8 fake devices)."""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType

import haliax_lite as hax
from haliax_lite.debug import ModuleProblems, diagnose_common_issues, visualize_shardings

Embed, Out = hax.Axis("embed", 4), hax.Axis("out", 2)


class Pair(eqx.Module):
    first: object
    second: object


class WithStatic(eqx.Module):
    weight: hax.NamedArray
    table: object = eqx.field(static=True)


def test_a_clean_model_passes():
    model = hax.nn.MLP.init(Embed, Out, width=8, depth=2, key=jax.random.PRNGKey(0))
    diagnose_common_issues(model)
    diagnose_common_issues({"a": hax.zeros(Embed), "b": hax.zeros(Embed), "n": 3})


@pytest.mark.parametrize("shared", ["named", "raw", "same_data_two_wrappers"])
def test_reused_arrays_are_reported_with_their_paths(shared):
    raw = jnp.zeros(3)
    if shared == "named":
        w = hax.zeros(Embed)
        model = Pair([w], {"k": w})
    elif shared == "raw":
        model = Pair(raw, [raw])
    else:
        model = Pair(hax.named(raw, "a"), hax.named(raw, "b"))
    with pytest.raises(ModuleProblems) as info:
        diagnose_common_issues(model)
    ((_, paths),) = info.value.reused_arrays
    assert len(paths) == 2 and paths[0].startswith(".first") and paths[1].startswith(".second")
    assert "Reused array" in str(info.value)


def test_static_arrays_are_reported_by_field_path():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # equinox warns about arrays in static fields itself
        inner = WithStatic(hax.zeros(Embed), jnp.ones(3))
        named_static = WithStatic(hax.zeros(Out), hax.ones(Out))
    with pytest.raises(ModuleProblems) as info:
        diagnose_common_issues(Pair([inner], {"x": named_static}))
    assert info.value.static_arrays == [".first[0].table", ".second['x'].table"]
    assert str(info.value).count("Static array at field") == 2
    assert not ModuleProblems() and str(ModuleProblems()) == "No problems found"


@pytest.mark.parametrize("axis_type", [AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def test_visualize_shardings_outside_and_inside_jit(capsys, axis_type):
    mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(axis_type,) * 2)
    x = hax.ones((hax.Axis("batch", 8), Embed))
    with jax.set_mesh(mesh):
        placed = hax.shard({"x": x, "raw": jnp.zeros((4, 2))}, {"batch": "data", "embed": "model"})
        visualize_shardings(placed)
        assert capsys.readouterr().out.splitlines() == [
            "['raw']: dim0->unsharded, dim1->unsharded",
            "['x']: batch->data, embed->model",
        ]

        @jax.jit
        def f(x):
            y = hax.shard(x * 2, {"batch": ("data", "model")})
            visualize_shardings(y)
            return y

        f(x)
    # explicit mesh axes carry the spec in the traced type; on auto ones the compiler's choice is shown
    batch = "data+model" if axis_type == AxisType.Explicit else "split 8 ways"
    assert capsys.readouterr().out.splitlines() == [f"<root>: batch->{batch}, embed->unsharded"]


def test_visualize_named_sharding_pads_short_specs(capsys):
    mesh = jax.make_mesh((8,), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    hax.debug.visualize_named_sharding((hax.Axis("batch", 8), Embed, Out), sharding)
    assert capsys.readouterr().out.strip() == "batch->data, embed->unsharded, out->unsharded"
