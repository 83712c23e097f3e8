"""A fine-tuned chat model, exported, is the same chat model in ``transformers``: its tokenizer's
``apply_chat_template`` gives the ids the run was trained on, and transformers' greedy ``generate`` gives the
tokens ``apps/chat.py --temperature 0`` prints, both stopping at the end of the turn; the harness renders
``--apply_chat_template`` prompts as transformers renders them with the export.

Needs the ``torch`` dependency group (CI installs the CPU build; see pyproject.toml).
"""

import json

import jax
import pytest
from tokenizers import Tokenizer

from meltemi.trainer.checkpoint.trained_model import load_model
from meltemi.trainer.generate.chat import chat_prompt_ids, conversation
from meltemi.trainer.trainer import Trainer
from tests.app_runs import app

pytestmark = pytest.mark.xdist_group("sft-interop")  # one worker fine-tunes and exports the model once
QUESTIONS = [("Say yes.", "yes"), ("Say no.", "no"), ("Say maybe.", "maybe"), ("Say hello.", "hello")]
ASKED = "Say yes."


def chat_corpus(path) -> str:
    """Short questions with one-word answers, many times over: a model learns to answer and end its turn."""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(400):
            question, answer = QUESTIONS[i % len(QUESTIONS)]
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
            f.write(json.dumps({"messages": messages}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def fine_tuned(small_config, tmp_path_factory):
    """The tests' small model pretrained 2 steps, then fine-tuned 40 steps on the corpus above; exported."""
    root = tmp_path_factory.mktemp("sft-interop")
    base = small_config.model_copy(
        update={
            "trainer": small_config.trainer.model_copy(update={"num_train_steps": 2, "checkpoint_every": 2})
        }
    )
    Trainer(base, root / "base", devices=jax.devices()[:1], progress=False).run()
    from meltemi.trainer.config_io import dump_config, load_config

    (root / "base.yaml").write_text(dump_config(base))
    sources = {"chat": {"corpus": chat_corpus(root / "chat.jsonl"), "format": "chat"}}
    config = load_config(root / "base.yaml", [
        "--trainer.initialize_from.path", str(root / "base"), "--data.sources", json.dumps(sources),
        "--data.cache_dir", str(root / "cache"), "--data.seq_len", "63", "--model.max_seq_len", "128",
        "--data.eval_fraction", "0.2",
        "--trainer.num_train_steps", "40", "--trainer.checkpoint_every", "40", "--trainer.log_batch_hashes",
        "false", "--optimizer.learning_rate", "1e-2", "--optimizer.warmup_steps", "2",
    ])  # fmt: skip
    Trainer(config, root / "sft", devices=jax.devices()[:1], progress=False).run()
    exported = app("export_hf.py", "--checkpoint", str(root / "sft"), "--out", str(root / "hf"), cwd=root)
    assert exported.returncode == 0, exported.stderr
    return root


def test_the_export_carries_the_template_the_end_of_turn_as_eos_and_every_stop_id(fine_tuned):
    trained = load_model(fine_tuned / "sft")
    config = json.loads((fine_tuned / "hf" / "tokenizer_config.json").read_text())
    generation = json.loads((fine_tuned / "hf" / "generation_config.json").read_text())
    assert config["chat_template"] == trained.chat.template.text and config["eos_token"] == "<|eot_id|>"
    assert config["bos_token"] == "<|begin_of_text|>"
    eot = Tokenizer.from_file(str(trained.tokenizer)).token_to_id("<|eot_id|>")
    assert generation["eos_token_id"] == [eot, 0]  # the end of a turn, then the end of a text


def test_transformers_renders_our_ids_and_its_greedy_reply_is_apps_chats_both_ending_the_turn(
    fine_tuned, torch, transformers
):
    hf = fine_tuned / "hf"
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf)
    model = transformers.LlamaForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    trained = load_model(fine_tuned / "sft")
    messages = conversation(ASKED)
    ours = chat_prompt_ids(trained.chat.template, Tokenizer.from_file(str(trained.tokenizer)), messages)
    theirs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    assert list(theirs["input_ids"]) == ours and ours.count(tokenizer.bos_token_id) == 1
    with torch.no_grad():
        generated = model.generate(torch.tensor([ours]), max_new_tokens=16, do_sample=False)
    reply = generated[0, len(ours) :].tolist()
    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    assert reply[-1] == eot and eot not in reply[:-1]  # transformers stopped at the end of the turn
    chatted = app("chat.py", "--checkpoint", str(fine_tuned / "sft"), "--message", ASKED, "--max-new-tokens",
                  "16", "--temperature", "0", cwd=fine_tuned)  # fmt: skip
    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout == tokenizer.decode(reply[:-1]) + "\n"  # the reply only, as transformers decodes it
    assert chatted.stdout.strip() == "yes"


def test_the_harness_renders_chat_prompts_as_transformers_renders_them_with_the_export(
    fine_tuned, transformers
):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (the eval group)")
    from meltemi.trainer.harness.model import MeltemiLM

    trained = load_model(fine_tuned / "sft")
    lm = MeltemiLM(model=trained.model, tokenizer=str(trained.tokenizer), chat=trained.chat)
    tokenizer = transformers.AutoTokenizer.from_pretrained(fine_tuned / "hf")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say yes."}]
    prefilled = [*history, {"role": "assistant", "content": "y"}]
    assert lm.apply_chat_template(history) == tokenizer.apply_chat_template(
        history, tokenize=False, add_generation_prompt=True
    )
    assert lm.apply_chat_template(prefilled, add_generation_prompt=False) == tokenizer.apply_chat_template(
        prefilled, tokenize=False, continue_final_message=True
    )
    assert (
        lm.prefix_token_id == tokenizer.bos_token_id and lm.chat_template(True) == trained.chat.template.text
    )


def test_chatting_with_a_model_that_was_not_fine_tuned_is_one_line_naming_it(fine_tuned):
    refused = app("chat.py", "--checkpoint", str(fine_tuned / "base"), "--message", "hi", cwd=fine_tuned)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "not a chat model (its checkpoint records no chat template)" in refused.stderr


def test_evaluate_renders_the_tasks_prompts_with_the_chat_template_when_asked(fine_tuned):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (the eval group)")
    done = app("evaluate.py", "--checkpoint", str(fine_tuned / "sft"), "--tasks", "stdlib_next_line",
               "--limit", "4", "--apply-chat-template", "--system-instruction", "Pick the next line.",
               "--out", str(fine_tuned / "chat-eval.json"), cwd=fine_tuned)  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((fine_tuned / "chat-eval.json").read_text())["config"]
    assert config["apply_chat_template"] is True and config["system_instruction"] == "Pick the next line."
    refused = app("evaluate.py", "--checkpoint", str(fine_tuned / "base"), "--tasks", "stdlib_next_line",
                  "--apply-chat-template", cwd=fine_tuned)  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: --apply_chat_template: this model has no chat template (it was not fine-tuned for chat: "
        "apps/sft.py)"
    )


def test_the_export_loads_back_as_the_run_it_came_from_and_apps_chat_talks_with_it(fine_tuned):
    """A Hugging Face directory is a model as a run is: the same parameters bit for bit, the same stop ids,
    template and special tokens, so ``apps/chat.py --checkpoint HF_DIR`` gives the run's reply."""
    from meltemi.trainer.hf.layout import on_host

    run, exported = load_model(fine_tuned / "sft"), load_model(fine_tuned / "hf")
    ours, theirs = jax.tree_util.tree_leaves(run.model), jax.tree_util.tree_leaves(exported.model)
    assert all(on_host(a).tobytes() == on_host(b).tobytes() for a, b in zip(ours, theirs, strict=True))
    assert exported.end_of_text.stop_ids == run.end_of_text.stop_ids
    assert exported.chat.template.text == run.chat.template.text
    assert exported.chat.template.special_tokens["bos_token"] == run.chat.template.special_tokens["bos_token"]
    assert exported.chat.template.special_tokens["eos_token"] == "<|eot_id|>"
    chatted = app("chat.py", "--checkpoint", str(fine_tuned / "hf"), "--message", ASKED, "--max-new-tokens",
                  "16", "--temperature", "0", cwd=fine_tuned)  # fmt: skip
    assert chatted.returncode == 0, chatted.stderr
    assert chatted.stdout.strip() == "yes"


def test_a_directory_transformers_saved_is_read_with_its_template_file_and_dtype(
    fine_tuned, torch, transformers
):
    """transformers writes the chat template to ``chat_template.jinja`` and the dtype to ``config.json``:
    a bf16 model it saved is read in bf16, with the template, answering as the run does."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(fine_tuned / "hf")
    model = transformers.LlamaForCausalLM.from_pretrained(fine_tuned / "hf", dtype=torch.bfloat16)
    saved = fine_tuned / "resaved"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    assert (saved / "chat_template.jinja").exists()
    assert "chat_template" not in json.loads((saved / "tokenizer_config.json").read_text())
    loaded, run = load_model(saved), load_model(fine_tuned / "sft")
    assert loaded.config.trainer.param_dtype == loaded.config.trainer.compute_dtype == "bfloat16"
    assert loaded.chat.template.text == run.chat.template.text
    assert loaded.end_of_text.stop_ids == run.end_of_text.stop_ids
