"""hax.field: axis names in a field's metadata, and partitioning that lays out the plain array such a
field holds as if it were a NamedArray with those axes (on 8 fake CPU devices, explicit and auto mesh)."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import haliax_lite as hax
from haliax_lite.field import with_field_axes

MAPPING = {"vocab": "data", "embed": "model"}


class Table(eqx.Module):
    rows: jax.Array = hax.field(axis_names=("vocab", "embed"))
    plain: jax.Array
    named: hax.NamedArray
    scale: float = hax.field(static=True, default=1.0)


class Wrapper(eqx.Module):
    tables: list
    bias: jax.Array = hax.field(axis_names=("embed",))


def make_model() -> Wrapper:
    rows = jnp.arange(32.0).reshape(8, 4)
    named = hax.ones((hax.Axis("vocab", 8), hax.Axis("embed", 4)))
    return Wrapper([Table(rows, jnp.ones((8, 4)), named)], jnp.arange(4.0))


def _lays_out(sharding, spec: PartitionSpec, ndim: int) -> bool:
    return sharding.is_equivalent_to(NamedSharding(sharding.mesh, spec), ndim)


@pytest.fixture(params=[AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def mesh(request):
    assert len(jax.devices()) == 8, "the root conftest provides 8 fake CPU devices"
    return jax.make_mesh((4, 2), ("data", "model"), axis_types=(request.param,) * 2)


def test_field_records_axis_names_beside_other_metadata():
    class M(eqx.Module):
        w: jax.Array = hax.field(axis_names=("a", hax.Axis("b", 2)), metadata={"note": 1})
        v: jax.Array = hax.field(converter=jnp.asarray)
        n: int = hax.field(static=True, default=3)

    fields = {f.name: f.metadata for f in dataclasses.fields(M)}
    assert fields["w"]["axis_names"] == ("a", "b") and fields["w"]["note"] == 1
    assert fields["v"]["axis_names"] is None and fields["n"]["static"]
    assert isinstance(M(jnp.zeros((1, 2)), [1.0, 2.0]).v, jax.Array)  # the converter ran
    with pytest.raises(ValueError, match="static"):
        hax.field(static=True, axis_names=("a",))


def test_pspec_for_and_infer_resource_partitions_use_declared_axes(mesh):
    model = make_model()
    specs = hax.partitioning.pspec_for(model, MAPPING)
    assert specs.bias == PartitionSpec("model")
    table = specs.tables[0]
    assert table.rows == PartitionSpec("data", "model")
    assert table.plain == PartitionSpec()  # undeclared arrays stay replicated
    assert table.named.array == PartitionSpec("data", "model")
    with jax.set_mesh(mesh):
        shardings = hax.partitioning.infer_resource_partitions(model, MAPPING)
    assert shardings.tables[0].rows == NamedSharding(mesh, PartitionSpec("data", "model"))
    assert jax.tree_util.tree_structure(shardings) == jax.tree_util.tree_structure(model)


def test_shard_lays_out_declared_arrays_and_keeps_the_module(mesh):
    model = make_model()
    with jax.set_mesh(mesh):
        placed = hax.shard(model, MAPPING)
    rows = placed.tables[0].rows
    assert isinstance(rows, jax.Array) and not isinstance(rows, hax.NamedArray)
    assert _lays_out(rows.sharding, PartitionSpec("data", "model"), 2)
    assert rows.addressable_shards[0].data.shape == (2, 2)
    assert _lays_out(placed.bias.sharding, PartitionSpec("model"), 1)
    assert jax.tree_util.tree_structure(placed) == jax.tree_util.tree_structure(model)
    assert placed.tables[0].scale == 1.0
    np.testing.assert_array_equal(np.asarray(rows), np.asarray(model.tables[0].rows))


def test_named_jit_lays_out_declared_fields_of_arguments_and_results(mesh):
    def step(model, x):
        table = model.tables[0]
        new_rows = table.rows * 2 + hax.sum(x).array
        return Wrapper([dataclasses.replace(table, rows=new_rows)], model.bias + 1)

    x = hax.ones(hax.Axis("batch", 8))
    with jax.set_mesh(mesh):
        f = hax.named_jit(step, axis_resources=MAPPING)
        out = f(make_model(), x)
        compiled = f.lower(make_model(), x).compile()
    rows = out.tables[0].rows
    assert _lays_out(rows.sharding, PartitionSpec("data", "model"), 2)
    assert _lays_out(out.bias.sharding, PartitionSpec("model"), 1)
    np.testing.assert_allclose(np.asarray(rows), np.arange(32.0).reshape(8, 4) * 2 + 8)
    out_rows, _plain, _named, out_bias = jax.tree_util.tree_leaves(compiled.output_shardings)
    assert _lays_out(out_rows, PartitionSpec("data", "model"), 2) and _lays_out(
        out_bias, PartitionSpec("model"), 1
    )


def test_a_declared_field_with_the_wrong_rank_is_named_in_the_error():
    bad = Wrapper([], jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"Wrapper\.bias declares axes \('embed',\)"):
        hax.partitioning.pspec_for(bad, MAPPING)


def test_modules_without_declared_fields_come_back_unchanged():
    lin = hax.nn.Linear.init(hax.Axis("embed", 4), hax.Axis("out", 2), key=jax.random.PRNGKey(0))
    assert with_field_axes(lin) is lin
    assert with_field_axes([lin])[0] is lin
