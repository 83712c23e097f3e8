"""The Llama: Hugging Face names, rotary scaling, causal and per-document attention, the weight-decay mask."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import haliax_lite as hax
from meltemi.trainer.config import ModelConfig, OptimizerConfig, RopeScaling
from meltemi.trainer.model.llama import Llama, parameter_count
from meltemi.trainer.model.rotary import inverse_frequencies
from meltemi.trainer.step.optimizer import weight_decay_mask

SMALL = ModelConfig(vocab_size=50, hidden_dim=32, intermediate_dim=48, num_layers=2, num_heads=4,
                    num_kv_heads=2, attention="reference", cross_entropy="reference")  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return Llama.init(SMALL, key=jax.random.key(0))


def named(ids):
    return hax.named(jnp.asarray(ids, jnp.int32), ("batch", "position"))


def test_parameters_carry_hugging_face_names_and_shapes(model):
    leaves = jax.tree_util.tree_leaves_with_path(model, is_leaf=hax.is_named_array)
    names = {".".join(p.name for p in path): {a.name: a.size for a in leaf.axes} for path, leaf in leaves}
    layer = "layers.stacked."
    assert names == {
        "embed_tokens.weight": {"vocab": 50, "embed": 32},
        layer + "self_attn.q_proj.weight": {"layers": 2, "kv_heads": 2, "q_heads_per_group": 2, "head_size": 8, "embed": 32},  # noqa: E501
        layer + "self_attn.k_proj.weight": {"layers": 2, "kv_heads": 2, "head_size": 8, "embed": 32},
        layer + "self_attn.v_proj.weight": {"layers": 2, "kv_heads": 2, "head_size": 8, "embed": 32},
        layer + "self_attn.o_proj.weight": {"layers": 2, "embed": 32, "kv_heads": 2, "q_heads_per_group": 2, "head_size": 8},  # noqa: E501
        layer + "mlp.gate_proj.weight": {"layers": 2, "mlp": 48, "embed": 32},
        layer + "mlp.up_proj.weight": {"layers": 2, "mlp": 48, "embed": 32},
        layer + "mlp.down_proj.weight": {"layers": 2, "embed": 32, "mlp": 48},
        layer + "input_layernorm.weight": {"layers": 2, "embed": 32},
        layer + "post_attention_layernorm.weight": {"layers": 2, "embed": 32},
        "norm.weight": {"embed": 32},
        "lm_head.weight": {"vocab": 50, "embed": 32},
    }  # fmt: skip
    assert parameter_count(model) == sum(np.prod(list(s.values())) for s in names.values())


def test_tied_embeddings_unembed_with_the_embedding_table():
    tied = Llama.init(SMALL.model_copy(update={"tie_embeddings": True}), key=jax.random.key(0))
    assert tied.lm_head is None and tied.unembedding() is tied.embed_tokens.weight


def test_a_token_sees_only_the_past_of_its_own_document(model):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, (1, 12))
    segments = np.array([[0] * 5 + [1] * 7])
    base = model.logits(named(ids), named(segments)).array
    future = ids.copy()
    future[0, 8:] = (future[0, 8:] + 1) % 50
    changed = model.logits(named(future), named(segments)).array
    np.testing.assert_allclose(changed[:, :8], base[:, :8], rtol=1e-6, atol=1e-6)
    assert not np.allclose(changed[:, 8:], base[:, 8:])
    other_document = ids.copy()
    other_document[0, :5] = (other_document[0, :5] + 7) % 50
    changed = model.logits(named(other_document), named(segments)).array
    np.testing.assert_allclose(changed[:, 5:], base[:, 5:], rtol=1e-5, atol=1e-6)


def test_every_attention_kernel_gives_the_same_logits(model):
    ids, segments = (
        named(np.arange(24).reshape(2, 12) % 50),
        named(np.repeat([[0, 0, 1]], 4, axis=1).repeat(2, 0)),
    )
    reference = model.logits(ids, segments).array
    attention = model.layers.stacked.self_attn
    for implementation in ("xla", "pallas"):
        swapped = dataclasses.replace(attention, implementation=implementation)
        other = eqx.tree_at(lambda m: m.layers.stacked.self_attn, model, swapped)
        np.testing.assert_allclose(other.logits(ids, segments).array, reference, rtol=2e-5, atol=2e-5)


def test_llama3_rope_scaling_matches_the_published_formula():
    scaling = RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192
    )
    ours = np.asarray(inverse_frequencies(128, 500000.0, scaling))
    base = 1.0 / (500000.0 ** (np.arange(0, 128, 2) / 128))
    expected = []
    for f in base:  # Meta's reference implementation, written out per frequency
        wavelength = 2 * np.pi / f
        if wavelength < 8192 / 4.0:
            expected.append(f)
        elif wavelength > 8192 / 1.0:
            expected.append(f / 8.0)
        else:
            smooth = (8192 / wavelength - 1.0) / (4.0 - 1.0)
            expected.append((1 - smooth) * f / 8.0 + smooth * f)
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    assert ours[0] == base[0].astype(np.float32) and ours[-1] < base[-1] / 7.9


def test_weight_decay_skips_embeddings_and_norms_unless_asked(model):
    mask = weight_decay_mask(model, OptimizerConfig())
    flags = {".".join(p.name for p in path): v for path, v in jax.tree_util.tree_leaves_with_path(mask)}
    assert [n for n, v in flags.items() if not v] == [
        "embed_tokens.weight", "layers.stacked.input_layernorm.weight",
        "layers.stacked.post_attention_layernorm.weight", "norm.weight",
    ]  # fmt: skip
    everything = weight_decay_mask(model, OptimizerConfig(decay_embeddings_and_norms=True))
    assert all(jax.tree_util.tree_leaves(everything))


def test_sequences_longer_than_the_model_supports_are_an_error(model):
    with pytest.raises(ValueError, match="exceed model.max_seq_len"):
        ids = named(np.zeros((1, 4097), int))
        model.hidden_states(ids, ids)


@pytest.mark.parametrize(
    ("implementation", "why"),
    [
        ("mosaic", "needs bfloat16 or float16, got float32"),  # the model computes in float32 here
        ("cudnn", "cuDNN attention takes no segment_ids"),
    ],
)
def test_an_attention_kernel_the_machine_refuses_is_a_one_line_config_error(model, implementation, why):
    """Raised while the step is traced, as a ``ConfigError`` the command line prints in one line."""
    from meltemi.trainer.errors import ConfigError

    ids = named(np.zeros((1, 8), int))
    swapped = dataclasses.replace(model.layers.stacked.self_attn, implementation=implementation)
    other = eqx.tree_at(lambda m: m.layers.stacked.self_attn, model, swapped)
    with pytest.raises(
        ConfigError,
        match=f"^model.attention {implementation} cannot run here: .*{why}.*; model.attention auto",
    ) as error:
        eqx.filter_jit(other.logits)(ids, ids)
    assert "\n" not in str(error.value)
    assert "interpret" not in str(error.value)  # the kernel's own advice is for callers of the kernel


def test_a_gpu_kernel_on_a_cpu_is_refused_with_the_config_remedy_not_the_kernels():
    from meltemi.trainer import adapters
    from meltemi.trainer.errors import ConfigError

    def zeros(*axes):
        return hax.named(jnp.zeros(tuple(n for _, n in axes), jnp.bfloat16), tuple(a for a, _ in axes))

    q = zeros(("batch", 1), ("position", 64), ("kv_heads", 2), ("q_heads_per_group", 2), ("head_size", 64))
    kv = zeros(("batch", 1), ("position", 64), ("kv_heads", 2), ("head_size", 64))
    segments = hax.named(jnp.zeros((1, 64), jnp.int32), ("batch", "position"))
    with pytest.raises(ConfigError) as error:
        adapters.attention(q, kv, kv, segments, implementation="mosaic")
    assert str(error.value) == (
        "model.attention mosaic cannot run here: the Mosaic GPU kernel runs on an NVIDIA GPU (Hopper), and "
        "JAX's backend here is 'cpu'; model.attention auto picks one that can"
    )
