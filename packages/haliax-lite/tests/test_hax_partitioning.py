"""Sharding by axis name on 8 fake CPU devices: results equal the unsharded ones, and the compiled
programs' output shardings are the ones the axis mapping asks for."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import haliax_lite as hax

Batch, Embed, Hidden = hax.Axis("batch", 8), hax.Axis("embed", 4), hax.Axis("hidden", 6)
RNG = np.random.default_rng(0)
X = hax.NamedArray(jnp.asarray(RNG.normal(size=(8, 4)).astype(np.float32)), (Batch, Embed))
W = hax.NamedArray(jnp.asarray(RNG.normal(size=(4, 6)).astype(np.float32)), (Embed, Hidden))
MAPPINGS = {
    "data": {"batch": "data"},
    "model": {"hidden": "model"},
    "both": {"batch": "data", "hidden": "model"},
    "data_and_replica": {"batch": ("replica", "data")},
}


def _lays_out(sharding, spec: PartitionSpec, ndim: int) -> bool:
    """Whether ``sharding`` places data as ``spec`` does (trailing Nones are insignificant)."""
    return sharding.is_equivalent_to(NamedSharding(sharding.mesh, spec), ndim)


def layer(x, w):
    return hax.sum(hax.tanh(hax.dot(x, w, axis="embed")), "hidden") + hax.mean(x, "embed")


UNSHARDED = layer(X, W)


@pytest.fixture(params=[AxisType.Explicit, AxisType.Auto], ids=["explicit", "auto"])
def mesh(request):
    assert len(jax.devices()) == 8, "the root conftest provides 8 fake CPU devices"
    return jax.make_mesh((2, 2, 2), ("replica", "data", "model"), axis_types=(request.param,) * 3)


@pytest.mark.parametrize("mapping_name", sorted(MAPPINGS))
def test_named_jit_results_and_output_shardings_follow_the_mapping(mesh, mapping_name):
    mapping = MAPPINGS[mapping_name]
    with jax.set_mesh(mesh):
        f = hax.named_jit(layer, axis_resources=mapping)
        out = f(X, W)
        np.testing.assert_allclose(np.asarray(out.array), np.asarray(UNSHARDED.array), rtol=1e-5)
        expected = hax.partitioning.pspec_for_axis(out.axes, mapping)
        assert _lays_out(out.array.sharding, expected, out.ndim)
        compiled = f.lower(X, W).compile()
        (out_sharding,) = jax.tree_util.tree_leaves(compiled.output_shardings)
        assert _lays_out(out_sharding, expected, out.ndim)
        hidden = hax.named_jit(lambda x, w: hax.dot(x, w, axis="embed"), axis_resources=mapping)(X, W)
        assert _lays_out(hidden.array.sharding, hax.partitioning.pspec_for_axis((Batch, Hidden), mapping), 2)


def test_shard_outside_and_inside_jit(mesh):
    with jax.set_mesh(mesh), hax.axis_mapping(MAPPINGS["both"]):
        placed = hax.shard(hax.dot(X, W, axis="embed"))
        assert _lays_out(placed.array.sharding, PartitionSpec("data", "model"), 2)
        assert placed.array.addressable_shards[0].data.shape == (4, 3)

        @jax.jit
        def g(x):
            return hax.shard(x * 2)

        doubled = g(X)
        assert _lays_out(doubled.array.sharding, PartitionSpec("data", None), 2)
        np.testing.assert_allclose(np.asarray(doubled.array), 2 * np.asarray(X.array))
        assert hax.auto_sharded(X).array.sharding.spec == PartitionSpec("data", None)


def test_shard_is_a_no_op_without_mesh_or_mapping():
    assert hax.shard(X) is X
    with hax.axis_mapping({"batch": "data"}):
        assert hax.shard(X).array is X.array


def test_in_and_out_axis_resources_and_fsdp(mesh):
    params = {"w": W}
    with jax.set_mesh(mesh):
        step = hax.fsdp(lambda p, x: {"w": p["w"] * 2 + hax.sum(x)}, {"embed": "data"}, {"batch": "data"})
        new = step(params, X)
        assert _lays_out(new["w"].array.sharding, PartitionSpec("data", None), 2)
        expected = 2 * np.asarray(W.array) + np.asarray(X.array).sum()
        np.testing.assert_allclose(np.asarray(new["w"].array), expected, rtol=1e-5)
        f = hax.named_jit(lambda x: x + 1, in_axis_resources={"batch": "model"}, out_axis_resources={})
        assert _lays_out(f(X).array.sharding, PartitionSpec(), 2)


def test_named_jit_static_arguments_and_donation(mesh):
    calls = []

    def scale(x, factor, *, name):
        calls.append(name)
        return x * factor

    with jax.set_mesh(mesh):
        f = hax.named_jit(scale, {"batch": "data"}, donate_args=(True, False))

        def placed():  # laid out like the result, so the donated buffer can be reused
            return hax.shard(X * 1.0, {"batch": "data"})

        fresh = placed()
        out = f(fresh, 3.0, name="a")
        np.testing.assert_allclose(np.asarray(out.array), 3 * np.asarray(X.array), rtol=1e-6)
        f(placed(), 3.0, name="a")
        f(placed(), 3.0, name="b")
        assert calls == ["a", "b"]  # the static keyword is part of the cache key
        assert fresh.array.is_deleted()


def test_decorator_forms():
    @hax.named_jit
    def plain(x):
        return x + 1

    @hax.named_jit(axis_resources={})
    def configured(x):
        return x + 2

    assert plain(X).axes == X.axes
    np.testing.assert_allclose(np.asarray(configured(X).array), np.asarray(X.array) + 2, rtol=1e-6)


def test_physical_axes_and_rounding(mesh):
    mapping = {"vocab": ("data", "model"), "batch": "data"}
    with jax.set_mesh(mesh), hax.axis_mapping(mapping):
        assert hax.physical_axis_name("vocab") == ("data", "model")
        assert hax.physical_axis_size("vocab") == 4 and hax.physical_axis_size("embed") is None
        assert hax.round_axis_for_partitioning(hax.Axis("vocab", 50257)) == hax.Axis("vocab", 50260)
        assert hax.round_axis_for_partitioning(hax.Axis("vocab", 8)) == hax.Axis("vocab", 8)
        sharding = hax.partitioning.sharding_for_axis((Batch, Embed))
        assert isinstance(sharding, NamedSharding) and sharding.spec == PartitionSpec("data", None)
    assert hax.physical_axis_size("vocab", mapping) is None  # no mesh


def test_pspec_for_and_infer_resource_partitions(mesh):
    tree = {"x": X, "raw": jnp.zeros(3), "n": 1}
    specs = hax.pspec_for(tree, {"batch": "data"})
    assert specs["x"].array == PartitionSpec("data", None) and specs["raw"] == PartitionSpec()
    assert specs["n"] is None
    with jax.set_mesh(mesh):
        shardings = hax.infer_resource_partitions(tree, {"embed": "model"})
        assert shardings["x"].array.spec == PartitionSpec(None, "model")
        placed = jax.device_put(tree["x"], shardings["x"])
        assert _lays_out(placed.array.sharding, PartitionSpec(None, "model"), 2)
    with pytest.raises(ValueError, match="needs a mesh"):
        hax.infer_resource_partitions(tree)


def test_axis_mapping_nests_and_merges():
    with hax.axis_mapping({"batch": "data"}):
        with hax.axis_mapping({"embed": "model"}, merge=True):
            assert hax.partitioning.current_thread_local_mapping() == {"batch": "data", "embed": "model"}
        with hax.axis_mapping({"embed": hax.ResourceAxis.MODEL}):
            assert hax.partitioning.current_thread_local_mapping() == {"embed": "model"}
        assert hax.partitioning.current_thread_local_mapping() == {"batch": "data"}
    assert hax.partitioning.current_thread_local_mapping() is None


@pytest.mark.parametrize(
    ("mapping", "array", "message"),
    [
        ({"batch": "nope"}, X, "'nope'"),
        ({"batch": "data", "embed": "data"}, X, "used by both 'batch' and 'embed'"),
        ({"hidden": ("data", "model", "replica")}, W, "not divisible"),
    ],
)
def test_bad_mappings_raise_clear_errors(mesh, mapping, array, message):
    with jax.set_mesh(mesh), pytest.raises(ValueError, match=message):
        hax.shard(array, mapping)


def test_shard_with_an_explicit_mesh_argument_and_no_global_mesh(mesh):
    placed = hax.shard(X, {"batch": "data"}, mesh=mesh)
    assert _lays_out(placed.array.sharding, PartitionSpec("data", None), 2)
    np.testing.assert_array_equal(np.asarray(placed.array), np.asarray(X.array))


def test_named_jit_returns_non_array_outputs():
    @hax.named_jit
    def f(x, label):
        return {"y": x * 2, "activation": hax.tanh, "label": label, "count": 3}

    for label in ("a", "b", "a"):
        out = f(X, label)
        assert out["activation"] is hax.tanh and out["label"] == label and out["count"] == 3
        np.testing.assert_allclose(np.asarray(out["y"].array), 2 * np.asarray(X.array), rtol=1e-6)


def _default_mesh():
    """A mesh as ``jax.make_mesh`` builds it by default (explicit axes since JAX 0.7)."""
    return jax.make_mesh((2, 2, 2), ("replica", "data", "model"))


@pytest.fixture(params=["make_mesh_default", "auto"])
def any_mesh(request):
    if request.param == "auto":
        return jax.make_mesh((2, 2, 2), ("replica", "data", "model"), axis_types=(AxisType.Auto,) * 3)
    return _default_mesh()


def test_make_mesh_default_has_explicit_axes():
    assert AxisType.Explicit in _default_mesh().axis_types


def test_fsdp_with_a_dot_over_the_sharded_parameter_axis(any_mesh):
    def step(x, w):
        return hax.dot(x, w, axis="embed")

    with jax.set_mesh(any_mesh):
        out = hax.fsdp(step, {"embed": "data"}, {"batch": "data"})(X, W)
    np.testing.assert_allclose(
        np.asarray(out.array), np.asarray(hax.dot(X, W, axis="embed").array), rtol=1e-5
    )
    assert out.axes == (Batch, Hidden)


@pytest.mark.parametrize("where", ["eager", "jit"])
@pytest.mark.parametrize("out_mapping", [{}, {"batch": "data"}, {"batch": "replica", "hidden": "data"}])
def test_dot_with_both_contracting_axes_sharded(any_mesh, where, out_mapping):
    expected = np.asarray(X.array) @ np.asarray(W.array)
    with jax.set_mesh(any_mesh), hax.axis_mapping({"embed": "model", **out_mapping}):
        x, w = hax.shard(X), hax.shard(W)

        def f(x, w):
            return hax.dot(x, w, axis="embed")

        out = f(x, w) if where == "eager" else jax.jit(f)(x, w)
        np.testing.assert_allclose(np.asarray(out.array), expected, rtol=1e-5)
        if AxisType.Explicit in any_mesh.axis_types:
            wanted = hax.partitioning.pspec_for_axis(out.axes, out_mapping)
            assert _lays_out(out.array.sharding, wanted, 2)


def test_contraction_keeps_the_sharding_of_uncontracted_axes_without_a_mapping():
    with jax.set_mesh(_default_mesh()):
        x = hax.shard(X, {"batch": "data", "embed": "model"})
        w = hax.shard(W, {"embed": "model", "hidden": "replica"})
        out = hax.dot(x, w, axis="embed")
        assert _lays_out(out.array.sharding, PartitionSpec("data", "replica"), 2)
        summed = hax.dot(x, w, axis=None)
        np.testing.assert_allclose(
            float(summed.array), float(np.sum(np.asarray(X.array) @ np.asarray(W.array))), rtol=1e-4
        )


class _Inner(eqx.Module):
    table: jax.Array = hax.field(axis_names=("hidden", "embed"))
    bias: jax.Array = hax.field(axis_names=("hidden",))


class _Outer(eqx.Module):
    inner: _Inner
    plain: jax.Array
    named: hax.NamedArray


def _model():
    return _Outer(_Inner(jnp.ones((6, 4)), jnp.zeros(6)), jnp.ones(3), hax.ones((Batch, Hidden)))


def test_plain_arrays_in_fields_declared_with_axis_names_are_laid_out_by_those_names(mesh):
    mapping = {"batch": "data", "hidden": "model"}
    specs = hax.pspec_for(_model(), mapping)
    assert specs.inner.table == PartitionSpec("model", None) and specs.inner.bias == PartitionSpec("model")
    assert specs.plain == PartitionSpec() and specs.named.array == PartitionSpec("data", "model")
    with jax.set_mesh(mesh):
        shardings = hax.infer_resource_partitions(_model(), mapping)
        assert shardings.inner.table.spec == PartitionSpec("model", None)
        placed = hax.shard(_model(), mapping)
        assert _lays_out(placed.inner.table.sharding, PartitionSpec("model", None), 2)
        assert isinstance(placed.inner.table, jax.Array)  # still a plain array, only laid out


def test_a_mapping_set_outside_jit_applies_to_shard_calls_inside(mesh):
    with jax.set_mesh(mesh), hax.axis_mapping({"batch": "data"}):
        inside = jax.jit(lambda x: hax.shard(x) * 2)(X)
        assert _lays_out(inside.array.sharding, PartitionSpec("data", None), 2)
        nested = jax.jit(lambda x: hax.named_jit(lambda y: y + 1, {"embed": "model"})(x))(X)
        assert _lays_out(nested.array.sharding, PartitionSpec(None, "model"), 2)
        np.testing.assert_allclose(nested.array, X.array + 1)


def test_named_jit_without_any_axis_resources_replicates(mesh):
    with jax.set_mesh(mesh):
        out = hax.named_jit(layer)(X, W)
        np.testing.assert_allclose(out.array, UNSHARDED.array, rtol=1e-5, atol=1e-5)
        assert out.array.sharding.is_fully_replicated
        module = hax.named_jit(lambda m: m)(_model())
        assert module.inner.table.sharding.is_fully_replicated
