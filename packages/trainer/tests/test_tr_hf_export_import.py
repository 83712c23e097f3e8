"""Hugging Face export and import without transformers: exact round trips, the files and their layout,
streaming, sharding, and errors that name the file, field or tensor."""

import json
import struct

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meltemi.trainer.config import ModelConfig, RopeScaling
from meltemi.trainer.hf import (
    HfFormatError,
    export_hf,
    hf_config,
    import_hf,
    model_config_from_hf,
    train_state_from_hf,
)
from meltemi.trainer.hf.layout import hf_tensors
from meltemi.trainer.hf.safetensors_files import TensorPlan, write_safetensors
from meltemi.trainer.hf.safetensors_reader import SafetensorsReader, TensorRegions
from meltemi.trainer.model.llama import Llama, cast_floating
from meltemi.trainer.step.mesh import MeshPlan
from meltemi.trainer.trainer import Trainer

SMALL = ModelConfig(
    vocab_size=96,
    hidden_dim=32,
    intermediate_dim=48,
    num_layers=3,
    num_heads=4,
    num_kv_heads=2,
    max_seq_len=64,
)


def leaves(model):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(model)]


def named(tree) -> list:
    """The NamedArrays of ``tree`` (or the NamedArray-wrapped shardings of a tree of them)."""
    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "axes"))


def assert_bitwise(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("tied", [False, True])
def test_export_then_import_is_bitwise_equal(tmp_path, tied):
    config = SMALL.model_copy(update={"tie_embeddings": tied})
    model = Llama.init(config, key=jax.random.key(1))
    out = export_hf(model, tmp_path / "hf")
    loaded_config, loaded = import_hf(out)
    assert loaded_config == config
    assert_bitwise(model, loaded)
    names = set(SafetensorsReader(out).shapes)
    assert ("lm_head.weight" in names) is not tied and len(names) == 2 + 9 * 3 + (not tied)


def test_bfloat16_export_holds_the_bfloat16_weights(tmp_path):
    model = Llama.init(SMALL, key=jax.random.key(2))
    out = export_hf(model, tmp_path / "hf", dtype="bfloat16")
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    _, loaded = import_hf(out, dtype="bfloat16")
    assert_bitwise(cast_floating(model, jnp.bfloat16), loaded)


def test_the_layout_is_hugging_faces(tmp_path):
    """Query head ``kv * group + g`` is rows ``[(kv * group + g) * head_dim, ...)`` of q_proj, as in HF."""
    model = Llama.init(SMALL, key=jax.random.key(3))
    reader = SafetensorsReader(export_hf(model, tmp_path / "hf"))
    q = (
        model.layers.stacked.self_attn.q_proj.weight
    )  # (layers, kv_heads, q_heads_per_group, head_size, embed)
    hf_q = reader["model.layers.2.self_attn.q_proj.weight"]
    assert hf_q.shape == (4 * 8, 32)
    np.testing.assert_array_equal(hf_q[(1 * 2 + 1) * 8 : (1 * 2 + 2) * 8], q.array[2, 1, 1])
    o = (
        model.layers.stacked.self_attn.o_proj.weight
    )  # (layers, embed, kv_heads, q_heads_per_group, head_size)
    np.testing.assert_array_equal(
        reader["model.layers.0.self_attn.o_proj.weight"][:, 8:16], o.array[0, :, 0, 1]
    )
    np.testing.assert_array_equal(reader["model.embed_tokens.weight"], model.embed_tokens.weight.array)


def test_large_exports_are_sharded_with_an_index(tmp_path):
    model = Llama.init(SMALL, key=jax.random.key(4))
    out = export_hf(model, tmp_path / "hf", max_shard_bytes=20_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(files) > 2 and set(index["weight_map"].values()) == set(files)
    assert set(index["weight_map"]) == set(hf_tensors(SMALL))
    assert index["metadata"]["total_size"] == sum(4 * np.prod(t.shape) for t in hf_tensors(SMALL).values())
    assert not (out / "model.safetensors").exists()
    assert_bitwise(model, import_hf(out)[1])


def test_tensors_are_written_one_at_a_time(tmp_path):
    """Each tensor is fetched only after the previous one is on disk: the host holds one at a time."""
    plan = [TensorPlan(f"t{i}", (3, 5), "float32") for i in range(4)]
    path = tmp_path / "model.safetensors"
    fetched = []

    def fetch(tensor):
        if fetched:
            (header,) = struct.unpack("<Q", path.read_bytes()[:8])
            assert path.stat().st_size == 8 + header + 60 * len(fetched)
        fetched.append(tensor.name)
        return np.full(tensor.shape, len(fetched), np.float32)

    write_safetensors(tmp_path, plan, fetch)
    assert fetched == ["t0", "t1", "t2", "t3"]
    assert float(SafetensorsReader(tmp_path)["t3"][0, 0]) == 4.0


configs = st.builds(
    ModelConfig,
    vocab_size=st.integers(8, 500),
    hidden_dim=st.sampled_from([16, 32, 64]),
    intermediate_dim=st.integers(1, 300),
    num_layers=st.integers(1, 40),
    num_heads=st.sampled_from([4, 8]),
    num_kv_heads=st.sampled_from([1, 2, 4]),
    head_dim=st.none() | st.sampled_from([8, 24]),
    max_seq_len=st.integers(1, 10**6),
    rope_theta=st.floats(1.0, 1e7),
    rope_scaling=st.none() | st.builds(RopeScaling, factor=st.floats(1.0, 32.0)),
    norm_eps=st.floats(1e-8, 1e-3),
    tie_embeddings=st.booleans(),
)


@settings(max_examples=50)
@given(config=configs)
def test_the_config_round_trips_through_config_json(config):
    fields = json.loads(json.dumps(hf_config(config, dtype="float32")))
    back = model_config_from_hf(fields)
    assert back.model_copy(update={"head_dim": config.head_dim}) == config
    assert back.head_size == config.head_size


def test_transformers_5_rope_parameters_are_read():
    fields = hf_config(SMALL, dtype="float32")
    del fields["rope_theta"], fields["rope_scaling"]
    fields["rope_parameters"] = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        **RopeScaling(factor=4.0).model_dump(),
    }
    config = model_config_from_hf(fields)
    assert config.rope_theta == 5e5 and config.rope_scaling == RopeScaling(factor=4.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_act": "gelu"}, r"config.json: hidden_act='gelu' is not supported \(ours: 'silu'\)"),
        ({"attention_bias": True}, "config.json: attention_bias=True is not supported"),
        ({"model_type": "mistral"}, "config.json: model_type 'mistral' is not a Llama"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
            "config.json: rope scaling 'yarn' is not supported",
        ),
        ({"num_key_value_heads": 3}, r"config.json: .*num_kv_heads \(3\) must divide model.num_heads \(4\)"),
        ({"hidden_size": None}, "config.json: hidden_size:"),
    ],
)
def test_configs_our_llama_cannot_be_are_named(change, message):
    fields = {**hf_config(SMALL, dtype="float32"), **change}
    with pytest.raises(HfFormatError, match=message):
        model_config_from_hf(fields)


def test_a_missing_config_field_is_named():
    fields = hf_config(SMALL, dtype="float32")
    del fields["intermediate_size"]
    with pytest.raises(HfFormatError, match="^config.json: the field 'intermediate_size' is missing$"):
        model_config_from_hf(fields)


@pytest.fixture
def exported(tmp_path):
    return export_hf(Llama.init(SMALL, key=jax.random.key(5)), tmp_path / "hf")


def test_a_vocabulary_mismatch_names_the_tensor_and_both_shapes(exported):
    other = SMALL.model_copy(update={"vocab_size": 128})
    expected = r"the tensor model.embed_tokens.weight has shape \(96, 32\), the config needs \(128, 32\)$"
    with pytest.raises(HfFormatError, match=expected):
        import_hf(exported, other)


def test_a_shape_mismatch_names_the_tensor_and_both_shapes(exported):
    other = SMALL.model_copy(update={"intermediate_dim": 64})
    expected = (
        r"the tensor model.layers.0.mlp.gate_proj.weight has shape \(48, 32\), the config needs \(64, 32\)$"
    )
    with pytest.raises(HfFormatError, match=expected):
        import_hf(exported, other)


def test_missing_and_unexpected_tensors_are_named(exported):
    with pytest.raises(
        HfFormatError,
        match=r"the tensor model.layers.3.self_attn.q_proj.weight \(shape \(32, 32\)\) is missing",
    ):
        import_hf(exported, SMALL.model_copy(update={"num_layers": 4}))
    with pytest.raises(HfFormatError, match=r"the tensor lm_head.weight \(shape \(96, 32\)\) has no place"):
        import_hf(exported, SMALL.model_copy(update={"tie_embeddings": True}))


def test_broken_directories_are_named(tmp_path, exported):
    with pytest.raises(HfFormatError, match="config.json: missing; not a Hugging Face model directory"):
        import_hf(tmp_path)
    (exported / "config.json").write_text("{not json")
    with pytest.raises(HfFormatError, match="config.json: not valid JSON"):
        import_hf(exported)
    (exported / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(HfFormatError, match="model.safetensors: not a readable safetensors file"):
        import_hf(exported, SMALL)
    (exported / "model.safetensors").unlink()
    with pytest.raises(
        HfFormatError, match="neither model.safetensors nor model.safetensors.index.json is there"
    ):
        import_hf(exported, SMALL)


def _rewrite_header(path, change) -> None:
    """``path`` with its header's JSON changed by ``change`` (the tensors' bytes kept)."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    change(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])


def _entry(name: str, field: str, value):
    return lambda header: header[name].__setitem__(field, value)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda p: p.write_bytes(p.read_bytes()[:-1]),
            r"it ends before byte \d+, where its last tensor ends",
        ),
        (
            lambda p: p.write_bytes(p.read_bytes()[:5]),
            "it ends before byte 8, where the header's length ends",
        ),
        (
            lambda p: p.write_bytes(struct.pack("<Q", 2**40) + p.read_bytes()[8:]),
            "a header of 1,099,511,627,776 bytes",
        ),
        (lambda p: p.write_bytes(struct.pack("<Q", 9) + b"{garbage!"), "its header is not JSON"),
        (
            lambda p: _rewrite_header(p, _entry("model.norm.weight", "dtype", "X32")),
            "model.norm.weight: dtype 'X32' is not one of F64, F32",
        ),
        (
            lambda p: _rewrite_header(p, _entry("model.embed_tokens.weight", "shape", [96, 31])),
            r"model.embed_tokens.weight: bytes 0..12288 for shape \(96, 31\) in F32 \(11904\)",
        ),
        (
            lambda p: _rewrite_header(p, _entry("model.norm.weight", "data_offsets", [0, 128])),
            "bytes do not follow the previous tensor's",
        ),
    ],
)
def test_a_damaged_safetensors_file_is_named_before_any_tensor_is_read(exported, damage, message):
    damage(exported / "model.safetensors")
    with pytest.raises(
        HfFormatError, match=r"model.safetensors: not a readable safetensors file \(.*" + message
    ):
        SafetensorsReader(exported)


def test_an_index_that_names_what_is_not_there_is_named(tmp_path):
    out = export_hf(Llama.init(SMALL, key=jax.random.key(7)), tmp_path / "hf", max_shard_bytes=20_000)
    index_path = out / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = index["weight_map"]["model.embed_tokens.weight"]
    index["weight_map"]["model.norm.weight"] = first
    index_path.write_text(json.dumps(index))
    with pytest.raises(
        HfFormatError, match=f"{first}: model.safetensors.index.json places model.norm.weight here"
    ):
        SafetensorsReader(out)
    index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(HfFormatError, match="which names no file of the directory"):
        SafetensorsReader(out)
    del index["weight_map"]["model.norm.weight"]
    index_path.write_text(json.dumps(index))
    (out / first).unlink()
    with pytest.raises(HfFormatError, match=f"{first}: listed in model.safetensors.index.json but missing"):
        SafetensorsReader(out)


def test_bad_export_requests_are_named(tmp_path, exported):
    model = Llama.init(SMALL, key=jax.random.key(6))
    with pytest.raises(HfFormatError, match="already exists and is not an empty directory"):
        export_hf(model, exported)
    with pytest.raises(HfFormatError, match="export dtype 'int8': choose one of float32, bfloat16"):
        export_hf(model, tmp_path / "x", dtype="int8")
    with pytest.raises(HfFormatError, match="no-such.json': no such file"):
        export_hf(model, tmp_path / "y", tokenizer=tmp_path / "no-such.json")
    assert not (tmp_path / "y").exists()


def test_the_model_sharded_as_trained_exports_the_same_bytes(make_config, run_dir, tmp_path):
    config = make_config("--trainer.mesh.data", "2", "--trainer.mesh.model", "2")
    trainer = Trainer(config, run_dir, devices=jax.devices()[:4], progress=False)
    sharded = trainer.initial_state().model
    assert len(sharded.layers.stacked.self_attn.q_proj.weight.array.sharding.device_set) == 4
    a = export_hf(sharded, tmp_path / "sharded")
    # np.asarray of a sharded array keeps the host copy on it (jax's _npy_value): the model would hold one of
    # its embedding, lm_head and norm as long as it lives, beside each tensor the export converts next.
    held = [
        leaf for leaf in jax.tree_util.tree_leaves(sharded) if getattr(leaf, "_npy_value", None) is not None
    ]
    assert held == []
    b = export_hf(jax.device_put(sharded, jax.devices()[0]), tmp_path / "local")
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


@settings(max_examples=40)
@given(
    shapes=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1, max_size=6),
    dtype=st.sampled_from(["float32", "bfloat16", "float16"]),
    limit=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
)
def test_safetensors_files_round_trip_exactly_at_any_shard_size(tmp_path_factory, shapes, dtype, limit, seed):
    out = tmp_path_factory.mktemp("st")
    rng = np.random.default_rng(seed)
    plan = [TensorPlan(f"w{i}", tuple(s), dtype) for i, s in enumerate(shapes)]
    arrays = {t.name: rng.normal(size=t.shape).astype(jnp.dtype(dtype)) for t in plan}
    files = write_safetensors(out, plan, lambda t: arrays[t.name], max_shard_bytes=limit)
    assert (len(files) > 1) == (out / "model.safetensors.index.json").exists()
    reader = SafetensorsReader(out)
    assert reader.shapes == {t.name: t.shape for t in plan}
    for name, array in arrays.items():
        assert reader[name].dtype == array.dtype and reader[name].tobytes() == array.tobytes()


@st.composite
def stored_regions(draw):
    """A row-major float32 tensor's bytes, its shape, and a region of it (slices of step 1, maybe empty)."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    region = []
    for n in shape:
        start = draw(st.integers(0, n))
        region.append(slice(start, draw(st.integers(start, n))))
    return shape, tuple(region)


@given(stored_regions())
def test_a_region_is_one_read_of_the_span_from_its_first_element_to_its_last(case):
    shape, region = case
    array = np.arange(np.prod(shape), dtype="<f4").reshape(shape)
    data, reads = array.tobytes(), []

    def read(start: int, stop: int) -> bytes:
        reads.append((start, stop))
        return data[start:stop]

    got = TensorRegions(read, array.dtype, shape)[region]
    np.testing.assert_array_equal(got, array[region])
    if array[region].size == 0:
        assert reads == []
        return
    corner = array[region]
    first, last = int(corner.flat[0]), int(corner.flat[-1])  # the values are the elements' flat positions
    assert reads == [(4 * first, 4 * (last + 1))]


def test_a_region_read_with_a_step_or_too_many_slices_is_refused():
    tensor = TensorRegions(lambda a, b: bytes(b - a), np.dtype("<f4"), (4, 4))
    with pytest.raises(TypeError, match="step 1"):
        tensor[::2]
    with pytest.raises(TypeError, match="at most 2 slices"):
        tensor[:, :, :]
    with pytest.raises(ValueError, match=r"cannot reshape a tensor of shape \(4, 4\) to \(3, 5\)"):
        tensor.reshape((3, 5))


@pytest.mark.parametrize("mesh", [("8", "1"), ("4", "2")], ids=["data 8", "data 4 x model 2"])
def test_an_import_onto_a_plan_reads_every_parameter_sharded_as_the_plan_says(
    make_config, tmp_path, mesh, monkeypatch
):
    """On 8 devices each parameter is read straight onto its sharding (each device holds its slice only:
    an eighth of the ``embed`` rows on ``data`` 8), to the values of the single-device import; the train
    state made from it has its optimizer state on the mesh too."""
    config = make_config("--trainer.mesh.data", mesh[0], "--trainer.mesh.model", mesh[1])
    plan = MeshPlan.of(config, devices=jax.devices()[:8])
    out = export_hf(Llama.init(config.model, key=jax.random.key(6)), tmp_path / "hf")
    reads = []
    real_read = SafetensorsReader._read

    def counted(self, file, start, stop, what):
        data = real_read(self, file, start, stop, what)
        if what.startswith("the tensor "):
            reads.append((what.removeprefix("the tensor "), stop - start))
        return data

    monkeypatch.setattr(SafetensorsReader, "_read", counted)
    _, sharded = import_hf(out, config.model, plan=plan)
    # one process holds every device's slice: each tensor read once, whole (not once per device)
    sizes = {name: int(np.prod(shape)) * 4 for name, shape in SafetensorsReader(out).shapes.items()}
    assert sorted(reads) == sorted(sizes.items())
    _, whole = import_hf(out, config.model)
    abstract = eqx.filter_eval_shape(Llama.init, config.model, key=jax.random.key(0))
    expected = plan.parameter_shardings(abstract)
    for leaf, want, plain in zip(named(sharded), named(expected), named(whole), strict=True):
        assert leaf.array.sharding == want.array and leaf.axes == plain.axes
        for shard in leaf.array.addressable_shards:
            assert shard.data.shape == want.array.shard_shape(leaf.array.shape)
        assert np.asarray(leaf.array).tobytes() == np.asarray(plain.array).tobytes()
    q = sharded.layers.stacked.self_attn.q_proj.weight
    embed = [a.name for a in q.axes].index("embed")
    assert {s.data.shape[embed] for s in q.array.addressable_shards} == {32 // int(mesh[0])}
    up = sharded.layers.stacked.mlp.up_proj.weight
    mlp = [a.name for a in up.axes].index("mlp")
    assert {s.data.shape[mlp] for s in up.array.addressable_shards} == {64 // int(mesh[1])}
    state = train_state_from_hf(out, config, plan=plan)
    for tree in (state.model, state.opt_state[1].mu):
        assert tree.layers.stacked.self_attn.q_proj.weight.array.sharding == q.array.sharding


def test_a_directory_s_model_files_are_read_as_transformers_writes_them_and_bad_ones_named(tmp_path):
    from meltemi.trainer.checkpoint.trained_model import locate_model
    from meltemi.trainer.errors import CheckpointError
    from meltemi.trainer.hf.model_files import read_model_files

    out = export_hf(Llama.init(SMALL, key=jax.random.key(0)), tmp_path / "hf")
    files = read_model_files(out)
    assert (files.dtype, files.tokenizer, files.chat, files.end_of_text.stop_ids) == (
        "float32",
        None,
        None,
        (),
    )
    assert locate_model(out).where() == str(out)
    with pytest.raises(
        CheckpointError, match=rf"model.safetensors is a file, not a run, .*: give the directory, {out}$"
    ):
        locate_model(out / "model.safetensors")
    from meltemi.trainer.generate.generation import GenerationError, sample_checkpoint

    with pytest.raises(
        GenerationError, match=r"hf: no tokenizer to turn text .*a Hugging Face directory's tokenizer.json"
    ):
        sample_checkpoint(out, ["def "])
    from meltemi.trainer.generate.chat import ChatSession
    from meltemi.trainer.generate.sampling import SamplingConfig

    with pytest.raises(
        GenerationError, match=r"hf: not a chat model \(its directory has no chat_template.jinja"
    ):
        ChatSession.of_checkpoint(out, SamplingConfig())
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    templates = [{"name": "tool_use", "template": "x"}, {"name": "default", "template": template}]
    bos = {"content": "<s>", "special": True}
    fields = {"chat_template": templates, "bos_token": bos, "eos_token": "</s>", "model_max_length": 8}
    (out / "tokenizer_config.json").write_text(json.dumps(fields))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [5, 7]}))
    files = read_model_files(out)
    assert files.chat.template.text == template and files.chat.template.special_tokens == {
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    assert files.end_of_text.stop_ids == (5, 7)
    (out / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    assert read_model_files(out).chat.template.text == "{{ messages[0]['content'] }}"
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": "</s>"}))
    with pytest.raises(
        HfFormatError, match=r"generation_config.json: eos_token_id is '</s>', not a token id"
    ):
        read_model_files(out)
    (out / "generation_config.json").write_text("[1, 2]")
    with pytest.raises(HfFormatError, match=r"generation_config.json: holds list, not a JSON object"):
        read_model_files(out)
    (out / "chat_template.jinja").unlink()
    (out / "generation_config.json").unlink()
    (out / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": [{"name": "rag", "template": "x"}]})
    )
    with pytest.raises(
        HfFormatError,
        match=r"tokenizer_config.json: chat_template is neither a string nor a list of named templates with "
        r"one named 'default' \(names: rag\)",
    ):
        read_model_files(out)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        CheckpointError,
        match=r"empty holds no checkpoint .* and is no Hugging Face model \(no config.json\)$",
    ):
        locate_model(tmp_path / "empty")


def test_a_model_larger_than_the_machines_memory_is_refused_before_it_is_read(exported, base, monkeypatch):
    """On a CPU, a model too large to hold is refused naming it and its size, instead of a process the system
    kills while it reads the weights; a half-size copy that fits loads."""
    from meltemi.trainer.checkpoint.trained_model import load_model
    from meltemi.trainer.errors import HostMemoryError
    from meltemi.trainer.step.host_memory import HostMemory

    count = sum(leaf.size for leaf in jax.tree.leaves(Llama.init(SMALL, key=jax.random.key(0))))
    monkeypatch.setattr(HostMemory, "now", staticmethod(lambda: HostMemory(3 * count, "available")))
    with pytest.raises(HostMemoryError) as caught:
        load_model(str(exported), dtype="float32")
    gib = {name: f"{n * count / 2**30:.1f} GiB" for name, n in (("needed", 4), ("there", 3))}
    assert str(caught.value) == (
        f"{exported}: the model ({count:,} parameters in float32) needs {gib['needed']} of memory and this "
        f"machine has {gib['there']} available: loading it would be killed (--dtype bfloat16 holds it in "
        "half)"
    )
    assert load_model(str(exported), dtype="bfloat16").model.embed_tokens.weight.dtype == jnp.bfloat16
    monkeypatch.setattr(HostMemory, "now", staticmethod(lambda: HostMemory(1, "available")))
    with pytest.raises(HostMemoryError, match=r"step-\d+: the model \([\d,]+ parameters in float32\) needs "):
        load_model(base)  # a run's checkpoint, read in its own dtype
