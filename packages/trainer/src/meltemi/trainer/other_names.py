"""Other tools' names for the trainer's settings and the apps' flags, as data, so that a user who types the
name they know (transformers' ``--max_steps``, a Llama config's ``hidden_size``, TRL's ``max_length``,
llama.cpp's ``--n-predict``) is told ours instead of a near spelling of something else; ``flag_guess`` reads
these tables for every command line.

>>> OTHER_NAMES["max_steps"].ours, APP_FLAGS["n_predict"][0].ours
('trainer.num_train_steps', '--max-new-tokens')
"""

from __future__ import annotations

import dataclasses

TRAINING_ARGUMENTS = "transformers' TrainingArguments"
LLAMA_CONFIG = "transformers' LlamaConfig"
SFT_CONFIG = "TRL's SFTConfig"
RUN_CLM = "transformers' run_clm.py"
LEVANTER = "Levanter"
MARIN = "Marin's SimpleTrainConfig"
TORCHTITAN = "torchtitan"
GENERATE = "transformers' generate"
LLAMA_CPP = "llama.cpp"
VLLM = "vLLM"
LM_EVAL = "lm-eval"
SAVE_PRETRAINED = "transformers' save_pretrained"
AXOLOTL = "Axolotl"


@dataclasses.dataclass(frozen=True)
class OtherName:
    """What another tool's setting is here: a config field (dotted) or a flag of the command (``--...``);
    for the fine-tuning command, its own flag where it has one; and how the meaning differs, if it does."""

    ours: str
    whose: str
    fine_tuning: str | None = None
    differs: str = ""


OTHER_NAMES: dict[str, OtherName] = {
    "max_steps": OtherName("trainer.num_train_steps", TRAINING_ARGUMENTS),
    "num_train_epochs": OtherName("trainer.num_train_steps", TRAINING_ARGUMENTS, differs="a run is counted in steps"),  # noqa: E501
    "steps": OtherName("trainer.num_train_steps", TORCHTITAN),
    "output_dir": OtherName("--run-dir", TRAINING_ARGUMENTS),
    "dump_folder": OtherName("--run-dir", TORCHTITAN),
    "resume_from_checkpoint": OtherName("--run-dir", TRAINING_ARGUMENTS, differs="the same command and --run-dir resume"),  # noqa: E501
    "per_device_train_batch_size": OtherName("trainer.global_batch_size", TRAINING_ARGUMENTS, differs="sequences per step over all devices"),  # noqa: E501
    "train_batch_size": OtherName("trainer.global_batch_size", LEVANTER),
    "batch_size": OtherName("trainer.global_batch_size", TORCHTITAN, differs="sequences per step over all devices"),  # noqa: E501
    "gradient_accumulation_steps": OtherName("trainer.microbatch_size", TRAINING_ARGUMENTS, differs="the sequences in each of a step's microbatches"),  # noqa: E501
    "lr": OtherName("optimizer.learning_rate", TORCHTITAN),
    "warmup_ratio": OtherName("optimizer.warmup_steps", TRAINING_ARGUMENTS, differs="a value below 1 is a fraction of the run"),  # noqa: E501
    "lr_scheduler_type": OtherName("optimizer.schedule", TRAINING_ARGUMENTS),
    "adam_beta1": OtherName("optimizer.beta1", TRAINING_ARGUMENTS),
    "adam_beta2": OtherName("optimizer.beta2", TRAINING_ARGUMENTS),
    "adam_epsilon": OtherName("optimizer.epsilon", TRAINING_ARGUMENTS),
    "max_norm": OtherName("optimizer.max_grad_norm", TORCHTITAN),
    "logging_steps": OtherName("trainer.log_every", TRAINING_ARGUMENTS),
    "eval_steps": OtherName("trainer.eval_every", TRAINING_ARGUMENTS),
    "steps_per_eval": OtherName("trainer.eval_every", LEVANTER),
    "max_eval_batches": OtherName("trainer.eval_batches", LEVANTER),
    "watch_targets": OtherName("trainer.watch.targets", LEVANTER, differs="params, grads, updates; no opt_state"),  # noqa: E501
    "split_scan_layers": OtherName("trainer.watch.per_layer", LEVANTER),
    "steps_per_task_eval": OtherName("eval.every", MARIN),
    "steps_per_hf_export": OtherName("trainer.export_every", MARIN),
    "num_fewshot": OtherName("eval.tasks", LM_EVAL, differs="per task: {name: TASK, num_fewshot: N}, or TASK:N"),  # noqa: E501
    "save_steps": OtherName("trainer.checkpoint_every", TRAINING_ARGUMENTS),
    "save_total_limit": OtherName("trainer.keep_last", TRAINING_ARGUMENTS),
    "bf16": OtherName("trainer.compute_dtype", TRAINING_ARGUMENTS, differs="bfloat16 is the default"),
    "fp16": OtherName("trainer.compute_dtype", TRAINING_ARGUMENTS),
    "max_length": OtherName("data.seq_len", SFT_CONFIG),
    "max_seq_length": OtherName("data.seq_len", SFT_CONFIG),
    "block_size": OtherName("data.seq_len", RUN_CLM),
    "dataset_text_field": OtherName("data.text_field", SFT_CONFIG),
    "field_messages": OtherName("data.chat.messages_field", AXOLOTL),
    "assistant_only_loss": OtherName("data.chat.loss_on", SFT_CONFIG, differs="assistant is the default"),
    "completion_only_loss": OtherName("data.chat.loss_on", SFT_CONFIG, differs="assistant is the default"),
    "model_name_or_path": OtherName("trainer.initialize_from.path", RUN_CLM, fine_tuning="--base"),
    "dataset_name": OtherName("data.corpus", RUN_CLM, fine_tuning="--data"),
    "train_file": OtherName("data.corpus", RUN_CLM, fine_tuning="--data"),
    "dataset_config_name": OtherName("data.sources.NAME.subset", RUN_CLM, fine_tuning="--subset"),
    "tokenizer_name": OtherName("data.tokenizer", RUN_CLM),
    "hidden_size": OtherName("model.hidden_dim", LLAMA_CONFIG),
    "intermediate_size": OtherName("model.intermediate_dim", LLAMA_CONFIG),
    "num_hidden_layers": OtherName("model.num_layers", LLAMA_CONFIG),
    "num_attention_heads": OtherName("model.num_heads", LLAMA_CONFIG),
    "num_key_value_heads": OtherName("model.num_kv_heads", LLAMA_CONFIG),
    "max_position_embeddings": OtherName("model.max_seq_len", LLAMA_CONFIG),
    "rms_norm_eps": OtherName("model.norm_eps", LLAMA_CONFIG),
    "tie_word_embeddings": OtherName("model.tie_embeddings", LLAMA_CONFIG),
    "initializer_range": OtherName("model.init_std", LLAMA_CONFIG),
}  # fmt: skip


ONE_PER_RUN = "one continuation per run: another --seed draws another"
APP_FLAGS: dict[str, tuple[OtherName, ...]] = {
    "n_predict": (OtherName("--max-new-tokens", LLAMA_CPP),),
    "max_tokens": (OtherName("--max-new-tokens", VLLM),),
    "do_sample": (OtherName("--temperature", GENERATE, differs="above 0 samples; 0 is greedy"),),
    "num_return_sequences": (OtherName("--seed", GENERATE, differs=ONE_PER_RUN),),
    "num_samples": (OtherName("--seed", VLLM, differs=ONE_PER_RUN),),
    "model": (OtherName("--checkpoint", f"{LLAMA_CPP}, {VLLM} and {LM_EVAL}"),),
    "model_args": (OtherName("--checkpoint", LM_EVAL, differs="pretrained=PATH is --checkpoint PATH, dtype=D is --dtype D"),),  # noqa: E501
    "pretrained": (OtherName("--checkpoint", LM_EVAL),),
    "output_path": (OtherName("--out", LM_EVAL),),
    "save_directory": (OtherName("--out", SAVE_PRETRAINED),),
    "torch_dtype": (OtherName("--dtype", GENERATE),),
    "file": (OtherName("--prompt", LLAMA_CPP, differs="a file's text: --prompt - < FILE"),),
    "system_prompt": (OtherName("--system", LLAMA_CPP), OtherName("--system-instruction", LLAMA_CPP)),
    "system_instruction": (OtherName("--system", LM_EVAL),),
}  # fmt: skip
"""Other tools' names for the flags of the apps that read a trained model (``apps/sample.py``, ``chat.py``,
``evaluate.py``, ``export_hf.py``): for each, its flags here, of which an app has at most one; an entry
counts only for an app that has its flag."""
