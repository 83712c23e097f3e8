"""A short run's model, exported to Hugging Face format, is the same model in ``transformers``: the same
tokens, logits within 1e-4 on real text, the same greedy continuations; imported back, the same bits, and
a train state that goes on training.

Needs the ``torch`` dependency group (CI installs the CPU build; see pyproject.toml).
"""

import json
import os

import jax
import numpy as np
import pytest
from tokenizers import Tokenizer

import haliax_lite as hax
from meltemi.datastore import build_store, corpora
from meltemi.trainer import adapters
from meltemi.trainer.config_io import load_config
from meltemi.trainer.generate.generation import generate
from meltemi.trainer.generate.sampling import SamplingConfig
from meltemi.trainer.hf import export_hf, import_hf, train_state_from_hf
from meltemi.trainer.step.train_step import make_train_step
from meltemi.trainer.trainer import Trainer

VOCAB = 384
STEPS = 30
pytestmark = pytest.mark.xdist_group("hf-interop")  # one worker trains, exports and loads the model once


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A tiny model trained for a few steps on standard-library sources, with its config and tokenizer."""
    root = tmp_path_factory.mktemp("interop")
    files = smallest_files()[:80]
    tokenizer = corpora.train_tokenizer(files, VOCAB, root / "tokenizer.json")
    build_store(files, tokenizer, root / "store", progress=False)
    config = load_config(None, [
        "--model.vocab_size", str(VOCAB), "--model.hidden_dim", "64", "--model.intermediate_dim", "128",
        "--model.num_layers", "2", "--model.num_heads", "4", "--model.num_kv_heads", "2",
        "--model.max_seq_len", "128", "--model.attention", "xla", "--model.cross_entropy", "xla",
        "--model.cross_entropy_block_size", "128", "--model.remat", "none",
        "--model.rope_scaling", "{factor: 4.0, original_max_position_embeddings: 32}",
        "--data.tokenizer", str(tokenizer), "--data.sources", f"{{py: {{store: {root / 'store'}}}}}",
        "--data.seq_len", "64", "--data.eval_fraction", "0.05", "--data.mixture_block_size", "16",
        "--trainer.num_train_steps", str(STEPS), "--trainer.global_batch_size", "16",
        "--trainer.eval_every", "0", "--trainer.compute_dtype", "float32", "--trainer.mesh.data", "1",
        "--optimizer.learning_rate", "1e-2", "--optimizer.warmup_steps", "1",
    ])  # fmt: skip
    trainer = Trainer(config, root / "run", devices=jax.devices()[:1], progress=False)
    state, step = trainer.initial_state(), jax.jit(make_train_step(config))
    for i in range(STEPS):
        state, _ = step(state, adapters.named_batch(adapters.batch_host_arrays(trainer.data.train.batch(i))))
    out = export_hf(state.model, root / "hf", tokenizer=tokenizer)
    return {"config": config, "model": state.model, "hf_dir": out, "trainer": trainer, "root": root}


@pytest.fixture(scope="module")
def hf_model(run, torch, transformers):
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM.from_pretrained(run["hf_dir"], dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def hf_tokenizer(run, transformers):
    return transformers.AutoTokenizer.from_pretrained(run["hf_dir"])


def smallest_files() -> list[str]:
    """The library's files by size, generated ones included: the model and prompts the tests were tuned on."""
    return sorted(corpora.python_stdlib(include_generated=True), key=lambda p: (os.path.getsize(p), p))


def real_text() -> str:
    path = smallest_files()[200]  # not trained on
    return open(path, encoding="utf-8").read()


def test_the_directory_has_every_file_transformers_and_servers_read(run):
    names = {p.name for p in run["hf_dir"].iterdir()}
    assert names == {
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json", "special_tokens_map.json",
    }  # fmt: skip
    generation = json.loads((run["hf_dir"] / "generation_config.json").read_text())
    assert (
        generation["eos_token_id"] == json.loads((run["hf_dir"] / "config.json").read_text())["eos_token_id"]
    )


def test_transformers_reads_the_same_config_and_tokens(run, hf_model, hf_tokenizer):
    config = run["config"].model
    assert hf_model.config.num_key_value_heads == config.num_kv_heads
    assert hf_model.config.rope_parameters["rope_type"] == "llama3"
    assert hf_model.config.rope_parameters["factor"] == 4.0
    assert hf_tokenizer.eos_token == corpora.EOS_TOKEN
    text = real_text()[:2000]
    assert (
        hf_tokenizer(text)["input_ids"] == Tokenizer.from_file(run["config"].data.tokenizer).encode(text).ids
    )
    assert hf_tokenizer.decode(hf_tokenizer(text)["input_ids"]) == text


def test_logits_on_real_text_equal_ours_within_1e_4(run, hf_model, hf_tokenizer, torch):
    ids = np.asarray([hf_tokenizer(real_text())["input_ids"][:128]])
    assert ids.shape == (1, 128)
    named = hax.named(jax.numpy.asarray(ids), ("batch", "position"))
    ours = np.asarray(run["model"].logits(named, hax.zeros_like(named)).array)
    with torch.no_grad():
        theirs = hf_model(torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4)
    assert np.abs(ours).max() > 1.0  # a trained model, not near-zero logits that match trivially


def test_greedy_continuations_equal_transformers_token_for_token(run, hf_model, hf_tokenizer, torch):
    text = real_text()
    prompts = [hf_tokenizer(text[start : start + 150])["input_ids"][:24] for start in (0, 300, 600)]
    assert all(len(p) == 24 for p in prompts)
    eos = hf_tokenizer.eos_token_id
    ours = generate(run["model"], prompts, SamplingConfig(max_new_tokens=40), eos_token_id=eos).completions
    for prompt, completion in zip(prompts, ours, strict=True):
        with torch.no_grad():
            out = hf_model.generate(
                torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=eos, pad_token_id=eos
            )
        assert completion.tokens == tuple(out[0, len(prompt) :].tolist())
    assert len({c.tokens for c in ours}) > 1  # the continuations depend on the prompt
    assert len({t for c in ours for t in c.tokens}) >= 3  # and are not one token repeated


def test_import_is_bitwise_equal_and_continues_training(run):
    config = run["config"]
    loaded_config, model = import_hf(run["hf_dir"], config.model)
    assert loaded_config == config.model
    for a, b in zip(jax.tree_util.tree_leaves(run["model"]), jax.tree_util.tree_leaves(model), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    more = config.model_copy(update={"trainer": config.trainer.model_copy(update={"num_train_steps": 2})})
    trainer = Trainer(more, run["root"] / "continued", devices=jax.devices()[:1], progress=False)
    state = train_state_from_hf(run["hf_dir"], more, plan=trainer.plan)
    summary = trainer.run(state)
    assert summary.steps == 2 and summary.skipped_steps == 0


def test_a_sharded_export_loads_in_transformers_with_every_tensor_of_the_single_file(
    run, tmp_path, transformers
):
    """A bucket export is this local one byte for byte (``test_tr_hf_buckets``); transformers reads its
    shards through the index to the same weights as the one-file export."""
    from meltemi.trainer.hf.safetensors_reader import SafetensorsReader

    out = export_hf(
        run["model"], tmp_path / "sharded", tokenizer=run["config"].data.tokenizer, max_shard_bytes=2**17
    )
    assert (
        len(list(out.glob("model-*-of-*.safetensors"))) >= 3
        and (out / "model.safetensors.index.json").is_file()
    )
    loaded = transformers.LlamaForCausalLM.from_pretrained(out).state_dict()
    single = SafetensorsReader(run["hf_dir"])
    assert set(single) <= set(loaded)
    for name in single:
        assert loaded[name].numpy().tobytes() == single[name].tobytes(), name


def test_a_bfloat16_export_loads_in_bfloat16(run, tmp_path, torch, transformers):
    out = export_hf(run["model"], tmp_path / "bf16", dtype="bfloat16")
    model = transformers.LlamaForCausalLM.from_pretrained(out)
    assert model.dtype == torch.bfloat16
    ids = torch.tensor([[1, 2, 3, 4]])
    named = hax.named(jax.numpy.asarray(ids.numpy()), ("batch", "position"))
    ours = np.asarray(run["model"].logits(named, hax.zeros_like(named)).array)
    with torch.no_grad():
        theirs = model(ids).logits.float().numpy()
    np.testing.assert_allclose(ours, theirs, atol=0.15 * np.abs(ours).max())
