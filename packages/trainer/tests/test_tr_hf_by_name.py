"""Hugging Face export maps our parameters to its tensors by name, never by the order of the layout table
or of the model's fields: a reordered table still writes every tensor where it belongs, and a parameter the
table lacks is an error naming it, never a tensor silently dropped or swapped."""

import jax
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.trainer.config import ModelConfig
from meltemi.trainer.hf import HfFormatError, export_hf, import_hf, layout
from meltemi.trainer.hf.safetensors_reader import SafetensorsReader
from meltemi.trainer.model.llama import Llama

SMALL = ModelConfig(vocab_size=96, hidden_dim=32, intermediate_dim=48, num_layers=2, num_heads=4,
                    num_kv_heads=2, max_seq_len=64)  # fmt: skip


@pytest.mark.parametrize("tied", [False, True])
def test_the_table_is_keyed_by_name_and_covers_every_parameter(tied):
    config = SMALL.model_copy(update={"tie_embeddings": tied})
    model = Llama.init(config, key=jax.random.key(0))
    table = layout.hf_tensors(config)
    assert {t.ours for t in table.values()} == set(hax.state_dict.to_state_dict(model))
    assert all(name == t.name for name, t in table.items())
    assert sorted(layout.parameter_names(model)) == sorted(t.ours for t in table.values())


def test_a_reordered_table_writes_every_tensor_where_it_belongs(tmp_path, monkeypatch):
    model = Llama.init(SMALL, key=jax.random.key(1))
    monkeypatch.setattr(layout, "_IN_LAYER", dict(reversed(list(layout._IN_LAYER.items()))))
    out = export_hf(model, tmp_path / "hf")
    reader = SafetensorsReader(out)
    up = model.layers.stacked.mlp.up_proj.weight["layers", 1].rearrange(("mlp", "embed")).array
    np.testing.assert_array_equal(reader["model.layers.1.mlp.up_proj.weight"], np.asarray(up))
    _, loaded = import_hf(out, SMALL)
    for a, b in zip(jax.tree_util.tree_leaves(model), jax.tree_util.tree_leaves(loaded), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_a_parameter_the_table_lacks_is_named(tmp_path, monkeypatch):
    model = Llama.init(SMALL, key=jax.random.key(2))
    lacking = {k: v for k, v in layout._IN_LAYER.items() if k != "mlp.up_proj.weight"}
    monkeypatch.setattr(layout, "_IN_LAYER", lacking)
    with pytest.raises(HfFormatError, match=r"layers\.0\.mlp\.up_proj\.weight: a parameter the Hugging Face"):
        export_hf(model, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no staging directory left
