"""Fine-tuning as a phase of a run: a chat corpus built into a chat store on first use, the run started from
its base (a run, a step-N checkpoint or a Hugging Face directory) with the base's parameters bit for bit and a
fresh optimizer at step 0, the vocabulary grown for a chat template's tokens when the base's tokenizer
lacks them, and every bad input refused in one line before anything is written."""

import json
import re
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

from meltemi.datastore import corpora
from meltemi.datastore.errors import DatastoreError
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.checkpoint.resume import starting_state
from meltemi.trainer.errors import CheckpointError, ConfigError, TrainerError
from meltemi.trainer.hf import export_hf
from meltemi.trainer.phase.initialize import initialize_from_base
from meltemi.trainer.trainer import Trainer

pytestmark = pytest.mark.xdist_group("sft")  # the base runs and the chat store are built once, on one worker


def train(config, run_dir):
    return Trainer(config, run_dir, devices=jax.devices()[:1], progress=False).run()


def model_arrays(step_dir: Path) -> dict[str, bytes]:
    manifest = inspect_checkpoint(step_dir)
    return {r.name: read_array(step_dir, r).tobytes() for r in manifest.arrays if r.name.startswith("model.")}


def state_arrays(model) -> dict[str, bytes]:
    from meltemi.trainer.checkpoint.format import leaf_name

    leaves = jax.tree_util.tree_flatten_with_path(model, is_leaf=lambda x: hasattr(x, "axes"))[0]
    return {"model." + leaf_name(path): np.asarray(leaf.array).tobytes() for path, leaf in leaves}


def test_a_fine_tuning_run_starts_from_the_bases_parameters_bit_for_bit_with_a_fresh_optimizer(
    sft_config, base, tmp_path
):
    trainer = Trainer(sft_config(), tmp_path / "sft", devices=jax.devices()[:1],
                      progress=False)  # fmt: skip
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert int(start.state.step) == 0 and start.initialized_from == str(base / "checkpoints" / "step-2")
    assert state_arrays(start.state.model) == model_arrays(base / "checkpoints" / "step-2")
    assert not np.asarray(start.state.opt_state[1].mu.embed_tokens.weight.array).any()
    assert trainer.data.chat is not None and "rows of 256 tokens" in trainer.data.packing["chat"]
    mixture = trainer.data.train.dataset
    rows = mixture.sources[mixture.names.index("chat")].num_sequences
    assert trainer.data.packing["chat"].endswith(f"; 2 steps of 4 rows read 8 of them: {8 / rows:.2f} epochs")
    summary = trainer.run()
    assert summary.steps == 2 and summary.first_eval_step == 0
    manifest = inspect_checkpoint(tmp_path / "sft" / "checkpoints" / "step-2")
    assert manifest.chat == trainer.data.chat and manifest.added_tokens == ()
    assert manifest.end_of_text.token == "<|eot_id|>"
    assert manifest.end_of_text.stop_ids == (4, 0)  # the end of a turn, then the end of a text


def test_a_hugging_face_export_of_the_base_starts_the_same_parameters(sft_config, base, tmp_path):
    from meltemi.trainer.checkpoint.trained_model import load_model

    trained = load_model(base)
    hf = export_hf(trained.model, tmp_path / "hf", tokenizer=trained.tokenizer)
    trainer = Trainer(sft_config(base=hf), tmp_path / "sft", devices=jax.devices()[:1],
                      progress=False)  # fmt: skip
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert start.initialized_from == str(hf)
    assert state_arrays(start.state.model) == model_arrays(base / "checkpoints" / "step-2")


def test_a_base_and_data_named_as_on_the_hub_are_read_from_the_hub_cache(
    sft_config, base, chat_data, tmp_path, monkeypatch
):
    from meltemi.datastore.testing import put_in_hub_cache
    from meltemi.trainer.checkpoint.trained_model import load_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    trained = load_model(base)
    exported = export_hf(trained.model, tmp_path / "hf", tokenizer=trained.tokenizer)
    put_in_hub_cache(tmp_path / "hub", "org/tiny", "model", exported)
    (tmp_path / "chats" / "data").mkdir(parents=True)
    shutil.copy(chat_data, tmp_path / "chats" / "data" / "train-00000-of-00001.jsonl")
    put_in_hub_cache(tmp_path / "hub", "org/chats", "dataset", tmp_path / "chats")
    named = load_model("org/tiny")
    assert named.hugging_face and named.config.model.vocab_size == trained.config.model.vocab_size
    config = sft_config("--data.cache_dir", str(tmp_path / "cache"), base="org/tiny", data="org/chats")
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:1], progress=False)
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert state_arrays(start.state.model) == model_arrays(base / "checkpoints" / "step-2")
    assert [p.name for p in (tmp_path / "cache" / "corpora").iterdir()][0].startswith("chats-")
    with pytest.raises(
        CheckpointError,
        match=r"org/missing: no such run or directory, nor is a model of that "
        r"name in the Hugging Face cache \(.*hub; read, never downloaded",
    ):
        train(sft_config(base="org/missing"), tmp_path / "missing")  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"corpus: org/nothing: no such file or directory, nor is a dataset"
    ):
        train(sft_config(base="org/tiny", data="org/nothing"), tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_a_data_sets_test_split_is_held_out_whole_and_its_train_split_trained_whole(
    sft_config, chat_data, tmp_path
):
    lines = chat_data.read_text().splitlines(keepends=True)
    (tmp_path / "chats" / "data").mkdir(parents=True)
    (tmp_path / "chats" / "data" / "train-00000-of-00001.jsonl").write_text("".join(lines[:200]))
    (tmp_path / "chats" / "data" / "test-00000-of-00001.jsonl").write_text("".join(lines[200:240]))
    cache = ["--data.cache_dir", str(tmp_path / "cache")]
    config = sft_config(*cache, data=tmp_path / "chats")
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:1], progress=False)
    source = trainer.config.data.sources["chat"]
    assert source.eval_store is not None and "/chats-test-" in source.eval_store
    assert "200 conversations in" in trainer.data.packing["chat"]
    assert "; held out: 40 conversations in" in trainer.data.packing["chat"]
    tail = Trainer(sft_config(*cache, "--data.held_out", "tail", data=tmp_path / "chats"),
                   tmp_path / "tail", devices=jax.devices()[:1], progress=False)  # fmt: skip
    assert tail.config.data.sources["chat"].eval_store is None
    assert "180 conversations in" in tail.data.packing["chat"]  # its last 10% held out
    shutil.copytree(tmp_path / "chats", tmp_path / "small")
    (tmp_path / "small" / "data" / "test-00000-of-00001.jsonl").write_text("".join(lines[200:201]))
    small = Trainer(sft_config(*cache, data=tmp_path / "small"), tmp_path / "small-run",
                    devices=jax.devices()[:1], progress=False)  # fmt: skip
    assert "; held out: 1 conversations in 1 rows" in small.data.packing["chat"]
    assert small.data.eval_steps["chat"] == 1  # one row, fewer than a batch of 4: one partial batch


def test_a_subset_of_a_data_set_is_read_as_its_card_names_it_with_its_own_test_split_held_out(
    sft_config, chat_data, tmp_path
):
    """SmolTalk's layout: `all` holds every conversation again beside each part's subset; the subset asked for
    is trained, and its own test split held out, never the conversations of the data set's other subsets."""
    lines = chat_data.read_text().splitlines(keepends=True)
    card = (
        "---\nconfigs:\n"
        + "".join(
            f"- config_name: {name}\n  data_files:\n  - split: train\n    path: data/{name}/train-*\n"
            f"  - split: test\n    path: data/{name}/test-*\n"
            for name in ("all", "code")
        )
        + "---\n"
    )
    files = {"all": (lines[:200], lines[200:240]), "code": (lines[:100], lines[200:220])}
    (tmp_path / "chats").mkdir()
    (tmp_path / "chats" / "README.md").write_text(card)
    for name, (train_lines, test_lines) in files.items():
        (tmp_path / "chats" / "data" / name).mkdir(parents=True)
        (tmp_path / "chats" / "data" / name / "train-00000-of-00001.jsonl").write_text("".join(train_lines))
        (tmp_path / "chats" / "data" / name / "test-00000-of-00001.jsonl").write_text("".join(test_lines))
    cache = ["--data.cache_dir", str(tmp_path / "cache")]
    choose = r"the subsets all, code, and none is its default: choose one \(--data.sources.chat.subset NAME\)"
    with pytest.raises(DatastoreError, match=choose):
        Trainer(sft_config(*cache, data=tmp_path / "chats"), tmp_path / "none", devices=jax.devices()[:1],
                progress=False)  # fmt: skip
    config = sft_config(*cache, "--data.sources.chat.subset", "code", data=tmp_path / "chats")
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:1], progress=False)
    assert "100 conversations in" in trainer.data.packing["chat"]
    assert "; held out: 20 conversations in" in trainer.data.packing["chat"]
    with pytest.raises(
        ConfigError, match=r"subset names the part of a corpus's data set to read: give it with"
    ):
        sft_config(*cache, "--data.sources", json.dumps({"chat": {"store": "/a/store", "subset": "code"}}))


def named(tree) -> list:
    """The NamedArrays of ``tree`` (or the NamedArray-wrapped shardings of a tree of them)."""
    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: hasattr(x, "axes"))


def record_single_device_arrays(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes of the single-device arrays ``jnp.asarray``, ``jnp.stack`` and ``jax.device_put`` make
    from now on (how a model read whole onto the default device is made)."""
    shapes = []

    def recording(function):
        def record(*args, **kwargs):
            result = function(*args, **kwargs)
            for leaf in jax.tree_util.tree_leaves(result):
                sharding = getattr(leaf, "sharding", None)  # a tracer (inside jit) has none
                if sharding is not None and len(sharding.device_set) == 1:
                    shapes.append(tuple(leaf.shape))
            return result

        return record

    for module, name in ((jax.numpy, "asarray"), (jax.numpy, "stack"), (jax, "device_put")):
        monkeypatch.setattr(module, name, recording(getattr(module, name)))
    return shapes


def test_a_hugging_face_base_is_read_onto_the_runs_mesh_never_whole_on_one_device(sft_config, base, tmp_path):
    """On 8 devices (data 4 x model 2) each of the base's tensors goes straight onto the run's mesh: the run
    starts from the base's parameters bit for bit, each laid out as the run's state is, and trains."""
    from meltemi.trainer.checkpoint.trained_model import load_model

    trained = load_model(base)
    hf = export_hf(trained.model, tmp_path / "hf", tokenizer=trained.tokenizer)
    config = sft_config("--trainer.mesh.data", "4", "--trainer.mesh.model", "2", base=hf)
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:8], progress=False)
    with pytest.MonkeyPatch.context() as patch:
        made_whole = record_single_device_arrays(patch)
        start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert state_arrays(start.state.model) == model_arrays(base / "checkpoints" / "step-2")
    split = set()
    shardings = trainer.program.state_shardings().model
    for leaf, want in zip(named(start.state.model), named(shardings), strict=True):
        assert leaf.array.sharding == want.array
        if want.array.shard_shape(leaf.array.shape) != leaf.array.shape:
            split.add(leaf.array.shape)
    assert len(split) >= 5 and not split & set(made_whole), made_whole
    assert trainer.run().steps == 2


@pytest.fixture
def plain_base(make_config, shared) -> Path:
    """A 2-step run whose tokenizer has no chat tokens (as a base pretrained before chat would have)."""
    from meltemi.datastore import build_store

    def build(root: Path) -> None:
        files = sorted(corpora.python_stdlib(), key=lambda p: (Path(p).stat().st_size, p))[:60]
        tokenizer = corpora.train_tokenizer(
            files, 380, root / "plain.json", special_tokens=("<|endoftext|>",)
        )
        build_store(files, tokenizer, root / "store", progress=False)
        config = make_config(
            "--model.vocab_size", "380", "--data.tokenizer", tokenizer,
            "--data.sources", json.dumps({"py": {"store": str(root / "store")}}),
            "--trainer.num_train_steps", "2", "--trainer.checkpoint_every", "2",
        )  # fmt: skip
        train(config, root / "run")

    return shared.get("sft-plain-base", build) / "run"


def test_a_base_without_the_templates_tokens_gets_them_appended_each_row_the_mean_of_the_bases(
    sft_config, plain_base, tmp_path
):
    config = sft_config("--model.vocab_size", "380", "--data.tokenizer", "null", base=plain_base)
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:1], progress=False)
    assert trainer.config.model.vocab_size == 384  # four tokens appended: <|begin_of_text|> ... <|eot_id|>
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert start.added_tokens == (
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
    )
    base = model_arrays(plain_base / "checkpoints" / "step-2")
    for name, table in (
        ("embed_tokens", start.state.model.embed_tokens),
        ("lm_head", start.state.model.lm_head),
    ):
        grown = np.asarray(table.weight.array)
        old = np.frombuffer(base[f"model.{name}.weight"], np.float32).reshape(380, -1)
        assert grown[:380].tobytes() == old.tobytes()
        np.testing.assert_allclose(grown[380:], np.repeat(old.mean(0, keepdims=True), 4, 0), atol=1e-8)
    trainer.run()
    manifest = inspect_checkpoint(tmp_path / "sft" / "checkpoints" / "step-2")
    assert manifest.added_tokens == start.added_tokens
    assert manifest.end_of_text.token == "<|eot_id|>" and manifest.end_of_text.id == 383


def test_fine_tuning_on_prompts_and_completions_trains_the_completions_only(sft_config, tmp_path, chat_data):
    from tokenizers import Tokenizer

    from meltemi.datastore import TokenStore

    exchanges = [json.loads(line)["messages"] for line in chat_data.read_text().splitlines()[:160]]
    records = [  # each prompt holds an earlier exchange, whose answer is context only
        {"prompt": [*before[-2:], *asked], "completion": [answer]}
        for before, (*asked, answer) in zip(exchanges, exchanges[1:], strict=False)
    ]
    data = tmp_path / "pc.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    config = sft_config("--data.cache_dir", str(tmp_path / "cache"), data=data)
    assert train(config, tmp_path / "sft").steps == 2
    (built,) = (tmp_path / "cache" / "corpora").iterdir()
    store, tokenizer = TokenStore.open(built), Tokenizer.from_file(config.data.tokenizer)
    answers = {record["completion"][0]["content"].strip() + "<|eot_id|>" for record in records}
    assert store.num_docs > 10  # the others, cut to a row, kept none of their completion and were dropped
    for i in range(store.num_docs):
        weights = store.doc_weights(i).astype(np.int8)
        assert (np.diff(weights, prepend=0) == 1).sum() == 1  # one trained run: the completion's
        trained = tokenizer.decode(store.doc(i)[weights == 1].tolist(), skip_special_tokens=False)
        assert trained in answers or store.doc(i).size == 256


def bad_chat(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})
    path.write_text(f"{good}\n{line}\n{good}\n")
    return path


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{oops", r"bad.jsonl, line 2: not valid JSON"),
        ('{"text": "hello"}', r"bad.jsonl, line 2: no 'messages' field"),
        ('{"messages": [{"role": "bot", "content": "hi"}]}', r"bad.jsonl, line 2: message 1 has role 'bot'"),
        (
            '{"messages": [{"role": "user", "content": "hi"}]}',
            r"bad.jsonl, line 2: no assistant token to train on",
        ),
    ],
)
def test_a_bad_conversation_is_one_line_naming_its_file_and_line_before_any_training(
    sft_config, tmp_path, line, error
):
    config = sft_config("--data.cache_dir", str(tmp_path / "cache"), data=bad_chat(tmp_path, line))
    with pytest.raises(DatastoreError, match=error) as caught:
        train(config, tmp_path / "sft")
    assert "\n" not in str(caught.value).split(". ")[0]
    assert not (tmp_path / "sft").exists()


def test_a_chat_corpus_named_through_a_link_finds_the_store_built_from_the_file(
    make_config, chat_data, tmp_path
):
    from meltemi.trainer.data.sources import build_source

    (tmp_path / "linked").symlink_to(chat_data.parent, target_is_directory=True)
    said: list[str] = []
    for data in (chat_data, tmp_path / "linked" / chat_data.name):
        sources = json.dumps({"chat": {"corpus": str(data), "format": "chat"}})
        config = make_config(
            "--data.cache_dir", str(tmp_path), "--data.sources", sources,
            "--data.seq_len", "255", "--model.max_seq_len", "256",
        )  # fmt: skip
        build_source(config, "chat", config.data.sources["chat"], config.data.tokenizer, said.append)
    assert said[-1].endswith("; nothing to do") and sum(": built " in line for line in said) == 1


INSTRUCT_TEMPLATE = (  # Llama 3 Instruct's layout as published: no generation blocks
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def test_a_chat_base_is_fine_tuned_in_its_own_template_even_without_generation_blocks(
    sft_config, base, chat_data, tmp_path, capsys
):
    from meltemi.datastore import TokenStore
    from meltemi.datastore.chat.turns import FROM_BEGINNINGS
    from meltemi.trainer.checkpoint.trained_model import load_model

    trained = load_model(base)
    hf = export_hf(trained.model, tmp_path / "hf", tokenizer=trained.tokenizer)
    config = json.loads((hf / "tokenizer_config.json").read_text())  # as the export wrote it, and then:
    config |= {
        "chat_template": INSTRUCT_TEMPLATE,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
    }
    (hf / "tokenizer_config.json").write_text(json.dumps(config))
    (hf / "special_tokens_map.json").unlink(missing_ok=True)
    cache = ["--data.cache_dir", str(tmp_path / "cache")]
    summary = train(sft_config(*cache, base=hf), tmp_path / "sft")
    assert f"chat template: the base's own ({hf}; data.chat.template auto)" in capsys.readouterr().err
    manifest = inspect_checkpoint(tmp_path / "sft" / "checkpoints" / "step-2")
    assert manifest.chat.template.text == INSTRUCT_TEMPLATE and manifest.added_tokens == ()
    assert manifest.end_of_text.token == "<|eot_id|>" and summary.steps == 2
    [store] = (tmp_path / "cache" / "corpora").iterdir()
    store = TokenStore.open(store)
    assert store.manifest["chat"]["assistant_tokens"] == FROM_BEGINNINGS
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(trained.tokenizer))
    answer = json.loads(chat_data.read_text().splitlines()[0])["messages"][-1]["content"]
    ids, weights = store.doc(0), store.doc_weights(0)
    assert tokenizer.decode(ids[weights == 1].tolist(), skip_special_tokens=False) == answer + "<|eot_id|>"
    assert "<|end_header_id|>\n\n" in tokenizer.decode(ids.tolist(), skip_special_tokens=False)
    shutil.rmtree(hf)  # a resume reads the template its run recorded, not the base
    resumed = train(sft_config(*cache, "--trainer.num_train_steps", "3", "--optimizer.extension", "tail",
                               base=hf), tmp_path / "sft")  # fmt: skip
    assert resumed.steps == 3 and len(list((tmp_path / "cache" / "corpora").iterdir())) == 1
    capsys.readouterr()
    train(sft_config(*cache, base=tmp_path / "sft"), tmp_path / "second")  # a chat run as the base
    assert "chat template: the base's own (" in capsys.readouterr().err
    assert (
        inspect_checkpoint(tmp_path / "second" / "checkpoints" / "step-2").chat.template.text
        == INSTRUCT_TEMPLATE
    )
    shipped = train(sft_config(*cache, "--data.chat.template", "llama3", base=base), tmp_path / "shipped")
    assert (
        inspect_checkpoint(tmp_path / "shipped" / "checkpoints" / "step-2").chat.template.text
        != INSTRUCT_TEMPLATE
    )
    assert shipped.steps == 2


def test_a_template_whose_turns_end_with_another_token_trains_and_stops_at_the_one_it_writes(
    sft_config, tmp_path
):
    gemma = tmp_path / "gemma.jinja"  # Gemma's layout: turns end with <end_of_turn>, not the eos_token
    gemma.write_text(
        "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>assistant\n{% endif %}"
    )
    cache = ["--data.cache_dir", str(tmp_path / "cache"), "--data.chat.template", str(gemma)]
    with pytest.raises(DatastoreError, match=r"<\|eot_id\|>.*\(end_of_turn"):
        train(sft_config(*cache, "--data.chat.end_of_turn", "<|eot_id|>"), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    summary = train(sft_config(*cache), tmp_path / "sft")  # the end of turn the template writes
    manifest = inspect_checkpoint(tmp_path / "sft" / "checkpoints" / "step-2")
    assert summary.steps == 2 and manifest.end_of_text.token == "<end_of_turn>"
    assert "<end_of_turn>" in manifest.added_tokens and manifest.chat.turn_end == "<end_of_turn>"
    named = train(sft_config(*cache, "--data.chat.end_of_turn", "<end_of_turn>"), tmp_path / "named")
    built = [s for s in (tmp_path / "cache" / "corpora").iterdir() if (s / "manifest.json").exists()]
    assert named.steps == 2 and len(built) == 1  # the same recipe, named or not: the same store


def test_a_base_that_is_neither_a_run_a_checkpoint_nor_a_hugging_face_directory_is_named(
    sft_config, tmp_path
):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not a model")
    with pytest.raises(
        CheckpointError, match=r"notes is neither a run .*, a step-N checkpoint nor a Hugging Face"
    ):
        train(sft_config(base=tmp_path / "notes"), tmp_path / "sft")
    assert not (tmp_path / "sft").exists()


def test_a_base_of_another_shape_than_the_config_is_named_by_field(sft_config, base, tmp_path):
    config = sft_config("--model.hidden_dim", "64")
    with pytest.raises(ConfigError, match=r"^model.hidden_dim: the base .*step-2 has 32, the config 64"):
        train(config, tmp_path / "sft")
    assert not (tmp_path / "sft").exists()


def test_a_resumed_fine_tuning_run_needs_only_its_own_directory(sft_config, base, tmp_path):
    """Once a run has checkpoints, its base is not read again: a base moved away does not stop a resume.
    Another base named for that directory is refused, writing nothing: the run would otherwise report
    (or go on with) the first base's fine-tuning as the other's."""
    moved = tmp_path / "base"
    shutil.copytree(base, moved)
    config = sft_config("--trainer.num_train_steps", "4", "--optimizer.extension", "tail", base=moved)
    first = train(sft_config(base=moved), tmp_path / "sft")
    assert first.steps == 2
    before = {path: path.stat().st_mtime_ns for path in (tmp_path / "sft").rglob("*")}
    was, now = re.escape(str(moved)), re.escape(str(base))
    with pytest.raises(
        ConfigError,
        match=rf"^trainer.initialize_from: .*sft/checkpoints/step-2 was started from {was}, not from {now}: "
        rf"train in another directory \(--run-dir DIR\) to start from {now}, or go on with this run from "
        rf"{was} \(as the base\)$",
    ):
        train(sft_config(base=base), tmp_path / "sft")
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "sft").rglob("*")} == before
    shutil.rmtree(moved)
    resumed = train(config, tmp_path / "sft")
    assert resumed.steps == 4 and resumed.resumed_from is not None


def test_the_fine_tuning_flags_belong_to_apps_sft(make_config):
    from meltemi.trainer.command import parse_command

    with pytest.raises(
        TrainerError, match=r"--base: a flag of apps/sft.py; here, set --trainer.initialize_from"
    ):
        parse_command(["--base", "runs/tiny"])
    command = parse_command(["--base", "runs/tiny", "--data", "a.jsonl,b/"], fine_tuning=True)
    assert command.overrides[:2] == ("--trainer.initialize_from.path", "runs/tiny")
    assert json.loads(command.overrides[3]) == {"a": {"corpus": "a.jsonl", "format": "chat"},
                                                  "b": {"corpus": "b/", "format": "chat"}}  # fmt: skip


def test_pretraining_data_mixed_into_fine_tuning_keeps_its_positions_and_trains_every_target(
    sft_config, corpus, tmp_path
):
    """A mixture of a chat source and a text source (pretraining data kept in the fine-tuning mix, as
    Marin's retrospective proposes): each row as its own source makes it, and the run trains."""
    sources = json.loads(sft_config().data.model_dump_json())["sources"]
    sources["py"] = {"store": corpus["store"], "weight": 1.0}
    config = sft_config("--data.sources", json.dumps(sources), "--data.mixture_block_size", "4")
    trainer = Trainer(config, tmp_path / "mixed", devices=jax.devices()[:1], progress=False)
    batch = trainer.data.train.batch(0)
    text = batch["source"] == trainer.data.source_names.index("py")
    assert text.any() and (~text).any()
    assert (batch["positions"][text] == np.arange(255)).all()  # text rows count on across documents
    assert batch["loss_mask"][text].mean() > 0.95 and batch["loss_mask"][~text].mean() < 0.5
    summary = trainer.run()
    assert summary.steps == 2
    held_out = summary.held_out_line()  # the mixture's loss is not an assistant's; each source's is shown
    assert (
        held_out.startswith("held-out loss: ")
        and "(chat, assistant tokens: " in held_out
        and "; py: " in held_out
    )


def test_the_standard_librarys_text_is_a_source_built_with_the_runs_tokenizer(
    sft_config, monkeypatch, tmp_path
):
    """``corpus: stdlib`` in ``data.sources`` (pretraining text mixed into fine-tuning), as ``data.corpus``
    takes it: the library's files tokenized with the run's tokenizer, built once; as chat it is refused."""
    from meltemi.trainer.data.sources import resolve_data

    files = corpora.python_stdlib()[:3]  # the library stands for itself in three files
    monkeypatch.setattr(corpora, "python_stdlib", lambda *args, **kwargs: files)
    sources = {
        "chat": json.loads(sft_config().data.sources["chat"].model_dump_json()),
        "py": {"corpus": "stdlib"},
    }
    cache = ("--data.cache_dir", str(tmp_path / "cache"))
    config = sft_config("--data.sources", json.dumps(sources), *cache)
    said = []
    resolved = resolve_data(config, say=said.append)
    store = Path(resolved.data.sources["py"].store)
    manifest = json.loads((store / "manifest.json").read_text())
    assert [source["url"] for source in manifest["sources"]] == files
    assert (
        manifest["tokenizer"]["sha256"]
        == json.loads((Path(resolved.data.sources["chat"].store) / "manifest.json").read_text())["tokenizer"][
            "sha256"
        ]
    )  # the run's own, as the chat store's
    assert any(line.startswith("building a token store of stdlib in ") for line in said)
    again = []
    assert resolve_data(config, say=again.append).data.sources["py"].store == str(store)
    assert not any(line.startswith("building") for line in again)
    sources["py"]["format"] = "chat"
    with pytest.raises(
        ConfigError, match=r"^data.sources.py.corpus: stdlib is text .*; its chat corpus is stdlib-chat$"
    ):
        resolve_data(sft_config("--data.sources", json.dumps(sources), *cache))


def test_pretraining_can_restart_positions_at_each_document(make_config, tmp_path):
    config = make_config(
        "--data.reset_positions", "true", "--data.seq_len", "64", "--model.max_seq_len", "64"
    )
    batch = Trainer(config, tmp_path / "run", devices=jax.devices()[:1], progress=False).data.train.batch(0)
    starts = batch["segment_ids"][:, 1:] != batch["segment_ids"][:, :-1]
    assert starts.any() and (batch["positions"][:, 1:][starts] == 0).all()
    assert (batch["positions"][:, 0] == 0).all()


@pytest.mark.parametrize("kind", ["run", "hf"])
def test_a_base_in_a_bucket_starts_the_same_parameters(sft_config, base, bucket, tmp_path, kind):
    """A base run, or its Hugging Face export, uploaded to a bucket (either emulator on loopback): read
    through the storage seam, the same step-0 parameters as the base on disk. A Hugging Face base is read
    in place, its tokenizer too: nothing of it is copied to the local disk."""
    from meltemi.datastore.storage import Directory
    from meltemi.trainer.checkpoint.trained_model import load_model

    local = base
    if kind == "hf":
        trained = load_model(base)
        local = export_hf(trained.model, tmp_path / "hf", tokenizer=trained.tokenizer)
    url = f"{bucket}/{kind}"
    there = Directory(url)
    for path in sorted(p for p in Path(local).rglob("*") if p.is_file()):
        there.write_bytes(path.relative_to(local).as_posix(), path.read_bytes())
    config = sft_config("--data.cache_dir", str(tmp_path / "cache"), base=url)
    trainer = Trainer(config, tmp_path / "sft", devices=jax.devices()[:1], progress=False)
    start = starting_state(trainer, warn=pytest.fail, initialize=initialize_from_base)
    assert state_arrays(start.state.model) == model_arrays(base / "checkpoints" / "step-2")
    assert start.initialized_from.startswith(url)
    if kind == "hf":
        from meltemi.trainer.phase.base import locate_base

        assert locate_base(url).tokenizer == f"{url}/tokenizer.json"  # what the run's tokenizer is checked by
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and "bases" in p.parts]
