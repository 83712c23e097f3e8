"""Export a Llama to a Hugging Face directory that ``transformers``, vLLM and lm-eval load as they are.

The weights are streamed: each tensor is taken from the model (one layer's slice of a stacked array),
copied to the host, cast and appended to its safetensors file before the next one is touched, so exporting
an 8B model needs host memory for one tensor, not for the model. The directory is written aside and
renamed into place, so a failed export leaves nothing half-written.

>>> import jax, tempfile
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> out = export_hf(Llama.init(config, key=jax.random.key(0)), Path(tempfile.mkdtemp()) / "hf")
>>> sorted(p.name for p in out.iterdir())
['config.json', 'generation_config.json', 'model.safetensors']
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from meltemi.trainer.data.chat import ChatRecord
from meltemi.trainer.hf.config_map import HfFormatError, hf_config
from meltemi.trainer.hf.layout import hf_tensors, our_tensor, parameter_names
from meltemi.trainer.hf.safetensors_files import TensorPlan, write_safetensors
from meltemi.trainer.hf.tokenizer_files import SpecialTokens, write_tokenizer_files
from meltemi.trainer.model.llama import Llama

DTYPES = ("float32", "bfloat16")


def export_hf(
    model: Llama,
    out_dir: str | Path,
    *,
    tokenizer: str | Path | None = None,
    dtype: str = "float32",
    eos_token: str | None = None,
    stop_ids: Sequence[int] = (),
    chat: ChatRecord | None = None,
    max_shard_bytes: int = 5 * 2**30,
) -> Path:
    """Write ``model`` as a Hugging Face Llama directory ``out_dir`` (which must not exist, or be empty).

    ``config.json``, ``generation_config.json`` and the weights (``model.safetensors``, or shards of at most
    ``max_shard_bytes`` with ``model.safetensors.index.json``) in ``dtype`` (float32 or bfloat16); with a
    ``tokenizer`` (its ``tokenizer.json``) also the tokenizer files, the end-of-text token being
    ``eos_token`` (a checkpoint's record of it) or else the run's rule (``run_tokenizer.end_of_text``).
    ``stop_ids`` are every id generation stops at (a chat model's end of turn and end of text: all of them
    go into ``generation_config.json``'s ``eos_token_id``); ``chat`` (a chat run's record) puts its chat
    template into ``tokenizer_config.json``. Returns ``out_dir``.
    """
    out_dir = Path(out_dir)
    if dtype not in DTYPES:
        raise HfFormatError(f"export dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise HfFormatError(f"{out_dir}: already exists and is not an empty directory; choose another")
    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _write_staging(model, staging, tokenizer, dtype, eos_token, tuple(stop_ids), chat, max_shard_bytes)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out_dir.exists():
        out_dir.rmdir()
    staging.rename(out_dir)
    return out_dir


def _write_staging(
    model: Llama,
    staging: Path,
    tokenizer,
    dtype: str,
    eos_token,
    stop_ids: tuple[int, ...],
    chat: ChatRecord | None,
    max_shard_bytes: int,
) -> None:
    config = model.config
    special = SpecialTokens(None, None)
    if tokenizer is not None:
        special = write_tokenizer_files(
            tokenizer, staging, model_max_length=config.max_seq_len, eos_token=eos_token, chat=chat
        )
    first = [] if special.eos_token_id is None else [special.eos_token_id]
    stops = list(dict.fromkeys(first + list(stop_ids)))
    eos = stops if len(stops) > 1 else special.eos_token_id  # one id as a number, as exports have always had
    fields = hf_config(config, dtype=dtype, bos_token_id=special.bos_token_id, eos_token_id=eos)
    _write_json(staging / "config.json", fields)
    generation = {"eos_token_id": eos, "do_sample": False}
    if special.bos_token_id is not None:
        generation["bos_token_id"] = special.bos_token_id
    _write_json(staging / "generation_config.json", generation)
    _write_weights(model, staging, dtype, max_shard_bytes)


def _write_json(path: Path, fields: dict) -> None:
    path.write_text(json.dumps(fields, indent=2) + "\n")


def _write_weights(model: Llama, out_dir: Path, dtype: str, max_shard_bytes: int) -> None:
    """Each Hugging Face tensor from our parameter of the same name (never by position); a parameter of the
    model the table lacks, or one it names that the model lacks, is an ``HfFormatError`` naming it."""
    table = hf_tensors(model.config)
    ours = {t.ours for t in table.values()}
    names = parameter_names(model)
    for name in names:
        if name not in ours:
            raise HfFormatError(f"{name}: a parameter the Hugging Face layout does not have")
    missing = sorted(ours - set(names))
    if missing:
        raise HfFormatError(f"{missing[0]}: in the Hugging Face layout, but the model has no such parameter")

    def fetch(planned: TensorPlan):
        tensor = table[planned.name]
        array = our_tensor(model, tensor.ours)
        if tuple(array.shape[a.name] for a in tensor.axes) != tuple(a.size for a in tensor.axes):
            raise HfFormatError(
                f"{tensor.ours}: shape {dict(array.shape)} does not fit the config {tensor.axes}"
            )
        return tensor.to_hf(array)

    plan = [TensorPlan(t.name, t.shape, dtype) for t in table.values()]
    write_safetensors(out_dir, plan, fetch, max_shard_bytes=max_shard_bytes)
