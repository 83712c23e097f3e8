"""State dicts read onto a mesh: a template whose abstract leaves carry shardings is filled leaf by leaf,
each device receiving only its slice (``Stacked`` leaves stacked on the host and placed once), to the same
values as an unsharded load; no leaf, and no block of one, is ever put whole on one device."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import NamedSharding, PartitionSpec

import haliax_lite as hax
from haliax_lite.host_placement import _within, covering_region, place_from_host
from haliax_lite.state_dict import StateDictError, from_state_dict, to_state_dict

DEVICES = 8
Layers, Embed, Mlp = hax.Axis("layers", DEVICES), hax.Axis("embed", 16), hax.Axis("mlp", 8)

pytestmark = pytest.mark.skipif(
    jax.device_count() < DEVICES, reason="needs the 8 fake CPU devices the root conftest sets up"
)


class Block(eqx.Module):
    proj: hax.nn.Linear
    norm: hax.nn.RmsNorm
    scale: jax.Array

    @staticmethod
    def init(key):
        return Block(hax.nn.Linear.init(Embed, Mlp, key=key), hax.nn.RmsNorm.init(Embed), jnp.ones(2))


def make_model():
    keys = jax.random.split(jax.random.key(0), Layers.size)
    return {
        "layers": hax.nn.Stacked.init(Layers, Block)(key=keys),
        "seq": hax.nn.BlockSeq.init(Layers.resize(2), Block)(key=keys[:2]),
        "head": jnp.arange(24.0).reshape(8, 3),
    }


def sharded_template(model, mapping: dict):
    """``model``'s abstract leaves carrying the shardings ``mapping`` gives them on 8 devices (the unnamed
    ``head`` split by its rows, the other unnamed leaves replicated)."""
    mesh = jax.make_mesh((DEVICES,), ("data",))
    abstract = eqx.filter_eval_shape(lambda: model)
    shardings = hax.partitioning.infer_resource_partitions(abstract, mapping, mesh=mesh)
    shardings["head"] = NamedSharding(mesh, PartitionSpec("data"))
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


def raw_leaves(tree) -> list:
    leaves = jax.tree.leaves(tree, is_leaf=hax.is_named_array)
    return [x.array if hax.is_named_array(x) else x for x in leaves]


def is_split(leaf) -> bool:
    return leaf.sharding.shard_shape(leaf.shape) != tuple(leaf.shape)


MAPPINGS = {"embed over the devices": {"embed": "data"}, "layers over the devices": {"layers": "data"}}


@pytest.mark.parametrize("mapping", MAPPINGS.values(), ids=MAPPINGS.keys())
def test_every_leaf_is_read_onto_its_sharding_with_the_unsharded_values(mapping):
    model = make_model()
    flat = to_state_dict(model)
    template = sharded_template(model, mapping)
    placed = from_state_dict(template, flat)
    unsharded = from_state_dict(eqx.filter_eval_shape(lambda: model), flat)
    assert jax.tree.structure(placed) == jax.tree.structure(template)
    for want, got, plain in zip(raw_leaves(template), raw_leaves(placed), raw_leaves(unsharded), strict=True):
        assert got.sharding == want.sharding and got.shape == want.shape
        assert len(got.addressable_shards) == DEVICES
        for shard in got.addressable_shards:
            assert shard.data.shape == want.sharding.shard_shape(want.shape)
            assert shard.data.devices() == {shard.device}
        np.testing.assert_array_equal(np.asarray(got), np.asarray(plain))
    # the sharded axis: each device holds an eighth of its rows
    weight = placed["layers"].stacked.proj.weight
    axis = weight.axes.index(Embed if "embed" in mapping else Layers)
    sizes = {shard.data.shape[axis] for shard in weight.array.addressable_shards}
    assert sizes == {weight.array.shape[axis] // DEVICES}
    assert {shard.data.shape for shard in placed["head"].addressable_shards} == {(1, 3)}


@pytest.fixture
def whole_placements(monkeypatch) -> list[tuple[int, ...]]:
    """The shape of every single-device array made by ``jnp.asarray``, ``jnp.array``, ``jnp.stack`` or
    ``jax.device_put`` while the test runs (the default-device path of a state-dict load)."""
    placements = []

    def recording(function):
        def record(*args, **kwargs):
            result = function(*args, **kwargs)
            if isinstance(result, jax.Array) and len(result.sharding.device_set) == 1:
                placements.append(tuple(result.shape))
            return result

        return record

    for module, name in ((jnp, "asarray"), (jnp, "array"), (jnp, "stack"), (jax, "device_put")):
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    return placements


@pytest.mark.parametrize("mapping", MAPPINGS.values(), ids=MAPPINGS.keys())
def test_no_split_leaf_nor_a_block_of_one_is_put_whole_on_one_device(mapping, whole_placements):
    model = make_model()
    flat = {name: np.asarray(value) for name, value in to_state_dict(model).items()}  # as read from a file
    template = sharded_template(model, mapping)
    split = [leaf for leaf in raw_leaves(template) if is_split(leaf)]
    forbidden = {tuple(leaf.shape) for leaf in split} | {tuple(leaf.shape[1:]) for leaf in split}
    assert len(split) >= 3  # the head, and the stacked leaves along the mapped axis
    whole_placements.clear()
    from_state_dict(template, flat)
    assert not forbidden & set(whole_placements), f"placed whole on one device: {whole_placements}"


def test_the_recorder_sees_an_unsharded_load(whole_placements):
    """The check above can fail: the default-device path (an abstract template without shardings) records
    each block's arrays and the stacked leaves."""
    model = make_model()
    from_state_dict(eqx.filter_eval_shape(lambda: model), to_state_dict(model))
    assert (Layers.size, Mlp.size, Embed.size) in whole_placements  # a stacked leaf
    assert (Mlp.size, Embed.size) in whole_placements  # a block of it


@pytest.mark.parametrize("entry", ["layers.3.proj.weight", "seq.1.norm.weight", "head"])
def test_a_shape_mismatch_is_the_same_error_on_a_sharded_template(entry):
    model = make_model()
    flat = to_state_dict(model)
    flat[entry] = np.zeros((*np.shape(flat[entry])[:-1], 5), np.float32)
    with pytest.raises(StateDictError) as plain:
        from_state_dict(eqx.filter_eval_shape(lambda: model), flat)
    with pytest.raises(StateDictError) as sharded:
        from_state_dict(sharded_template(model, {"embed": "data"}), flat)
    assert str(sharded.value) == str(plain.value) and str(plain.value).startswith(f"{entry}: ")


def test_a_template_without_shardings_still_loads_onto_the_default_device():
    model = make_model()
    loaded = from_state_dict(eqx.filter_eval_shape(lambda: model), to_state_dict(model))
    for leaf in raw_leaves(loaded):
        assert leaf.devices() == {jax.devices()[0]} and isinstance(leaf, jax.Array)


class CountingRegions:
    """A host value read region by region (``host_placement.HostRegions``), as a file reader would be,
    counting the elements each read returns."""

    def __init__(self, array: np.ndarray, reads: list[int]):
        self.array, self.reads = array, reads
        self.shape, self.dtype = array.shape, array.dtype

    def __getitem__(self, index):
        region = self.array[index]
        self.reads.append(region.size)
        return region.copy()

    def __array__(self, dtype=None, copy=None):
        return self[tuple(slice(None) for _ in self.shape)]


@pytest.mark.parametrize("mapping", MAPPINGS.values(), ids=MAPPINGS.keys())
def test_regions_read_lazily_are_read_once_each(mapping):
    """Every entry given as a region reader is read once, whole here (one process holds every device's
    slice), a stacked leaf's blocks each once, never a read per device; the values are the eager load's."""
    model = make_model()
    flat = {name: np.asarray(value) for name, value in to_state_dict(model).items()}
    reads = {name: [] for name in flat}
    lazy = {name: CountingRegions(value, reads[name]) for name, value in flat.items()}
    template = sharded_template(model, mapping)
    placed = from_state_dict(template, lazy)
    for want, got in zip(raw_leaves(from_state_dict(template, flat)), raw_leaves(placed), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert reads == {name: [value.size] for name, value in flat.items()}


def test_regions_read_lazily_load_whole_onto_the_default_device():
    model = make_model()
    flat = {name: np.asarray(value) for name, value in to_state_dict(model).items()}
    reads: list[int] = []
    loaded = from_state_dict(
        eqx.filter_eval_shape(lambda: model), {n: CountingRegions(v, reads) for n, v in flat.items()}
    )
    for want, got in zip(
        raw_leaves(from_state_dict(eqx.filter_eval_shape(lambda: model), flat)),
        raw_leaves(loaded),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert sum(reads) == sum(v.size for v in flat.values())


def test_a_value_is_read_once_over_the_box_its_slices_cover():
    """Rows split over a 4 x 2 mesh's first axis, replicated over its second: JAX asks for each of four
    slices twice; the value is read once (one process holds them all: the whole)."""
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    value, reads = np.arange(32.0).reshape(8, 4), []
    placed = place_from_host(CountingRegions(value, reads), NamedSharding(mesh, PartitionSpec("data")))
    np.testing.assert_array_equal(np.asarray(placed), value)
    assert reads == [32]


@st.composite
def regions_in_a_shape(draw) -> tuple[tuple[int, ...], list[tuple[slice, ...]]]:
    """A shape and a few non-empty regions of it (slices of step 1)."""
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=4)))

    def one_region() -> tuple[slice, ...]:
        starts = [draw(st.integers(0, n - 1)) for n in shape]
        return tuple(slice(a, draw(st.integers(a + 1, n))) for a, n in zip(starts, shape, strict=True))

    return shape, [one_region() for _ in range(draw(st.integers(1, 5)))]


@given(regions_in_a_shape())
def test_the_covering_box_holds_every_region_and_no_more(case):
    """Each region read out of the box (``_within``) is the region of the whole; the box is the smallest:
    each of its faces touches some region."""
    shape, indices = case
    value = np.arange(np.prod(shape)).reshape(shape)
    box = covering_region(indices, shape)
    held = value[box]
    for index in indices:
        np.testing.assert_array_equal(held[_within(index, box, shape)], value[index])
    for d, face in enumerate(box):
        assert face.start == min(i[d].indices(shape[d])[0] for i in indices)
        assert face.stop == max(i[d].indices(shape[d])[1] for i in indices)


def test_an_empty_region_of_stacked_parts_reads_nothing():
    from haliax_lite.host_placement import StackedRegions

    reads: list[int] = []
    stacked = StackedRegions([CountingRegions(np.ones((2, 3)), reads) for _ in range(4)], axis=0)
    assert stacked[2:2].shape == (0, 2, 3) and stacked[:, 1:1].shape == (4, 0, 3)
    assert reads == [0, 0, 0, 0]  # the second region asks each part for an empty one
