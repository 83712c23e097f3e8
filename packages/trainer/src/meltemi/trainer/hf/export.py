"""Export a Llama to a Hugging Face directory that ``transformers``, vLLM and lm-eval load as they are, on
the local disk or straight into a bucket.

The weights are streamed: each tensor is taken from the model (one layer's slice of a stacked array),
copied to the host, cast and written before the next one is touched, so exporting an 8B model needs host
memory for one tensor, not for the model (in a bucket, plus the shard being assembled: see
``safetensors_files``). The target is checked first: a local directory that is new or empty, a bucket
prefix that can be written and holds nothing. ``config.json`` is written last, so a reader that finds it
finds a whole export. A local export is written aside (``<out>.partial``) and renamed into place, so a
failed one leaves nothing; a failed export into a bucket never leaves ``config.json`` and deletes what it
had written, as far as the store lets it.

>>> import jax, tempfile
>>> from meltemi.trainer.config import ModelConfig
>>> from meltemi.trainer.model.llama import Llama
>>> config = ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=4, num_kv_heads=2)
>>> out = export_hf(Llama.init(config, key=jax.random.key(0)), Path(tempfile.mkdtemp()) / "hf")
>>> sorted(p.name for p in out.iterdir())
['config.json', 'generation_config.json', 'model.safetensors']
>>> export_hf(Llama.init(config, key=jax.random.key(0)), "memory://doc/export/hf").url
'memory://doc/export/hf'
>>> Directory("memory://doc/export/hf").list()
['config.json', 'generation_config.json', 'model.safetensors']
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Directory, Location, check_writable
from meltemi.trainer.hf.config_map import HfFormatError, hf_config
from meltemi.trainer.hf.layout import hf_tensors, our_tensor, parameter_names
from meltemi.trainer.hf.safetensors_files import MAX_SHARD_BYTES, TensorPlan, write_safetensors
from meltemi.trainer.hf.tokenizer_files import SpecialTokens, write_tokenizer_files
from meltemi.trainer.model.llama import Llama

if TYPE_CHECKING:
    from meltemi.datastore.chat.recipe import ChatRecipe

DTYPES = ("float32", "bfloat16")


def export_target(out_dir: str | os.PathLike | Location) -> Location:
    """Where an export goes, checked before any work: a local directory that does not exist or is empty, or
    a bucket prefix that can be written (probed: a ``StorageError`` naming the mistake) and holds no object;
    an ``HfFormatError`` naming it otherwise.

    >>> Directory("memory://doc/target/hf").write_text("notes.txt", "mine")
    >>> export_target("memory://doc/target/hf")
    Traceback (most recent call last):
    ...
    meltemi.trainer.hf.config_map.HfFormatError: memory://doc/target/hf: already holds objects; choose another
    """
    target = Location.parse(out_dir)
    local = target.local_path
    if local is not None:
        if local.exists() and (not local.is_dir() or any(local.iterdir())):
            raise HfFormatError(f"{target}: already exists and is not an empty directory; choose another")
        return target
    if Directory(check_writable(target, once=True)).list():  # the app's early check and this one: one probe
        raise HfFormatError(f"{target}: already holds objects; choose another")
    return target


def export_hf(
    model: Llama,
    out_dir: str | os.PathLike | Location,
    *,
    tokenizer: str | Path | Location | None = None,
    dtype: str = "float32",
    eos_token: str | None = None,
    stop_ids: Sequence[int] = (),
    chat: ChatRecipe | None = None,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path | Location:
    """Write ``model`` as a Hugging Face Llama directory ``out_dir`` (a local path, new or empty, or an
    empty bucket prefix: ``s3://``, ``gs://``); return it (a ``Path`` when local, else its ``Location``).

    ``config.json``, ``generation_config.json`` and the weights (``model.safetensors``, or shards of at most
    ``max_shard_bytes`` with ``model.safetensors.index.json``) in ``dtype`` (float32 or bfloat16); with a
    ``tokenizer`` (its ``tokenizer.json``, a path or URL) also the tokenizer files, the end-of-text token
    being ``eos_token`` (a checkpoint's record of it) or else the run's rule (``run_tokenizer.end_of_text``).
    ``stop_ids`` are every id generation stops at (a chat model's end of turn and end of text: all of them
    go into ``generation_config.json``'s ``eos_token_id``); ``chat`` (a chat run's recipe) puts its chat
    template into ``tokenizer_config.json``.

    A failed export into a bucket leaves no ``config.json``; it deletes the objects it had written, and
    those the store refuses to delete stay (whole shards and small files, never a part of one), so the
    prefix is not empty and a new export there is refused until they are deleted.
    """
    if dtype not in DTYPES:
        raise HfFormatError(f"export dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    target = export_target(out_dir)
    write = (model, tokenizer, dtype, eos_token, tuple(stop_ids), chat, max_shard_bytes)
    local = target.local_path
    if local is None:
        bucket = _Recorded(target)
        try:
            _write(bucket, *write)
        except BaseException:
            bucket.delete_written()
            raise
        return target
    staging = local.with_name(local.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        _write(Directory(staging), *write)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if local.exists():
        local.rmdir()
    staging.rename(local)
    return local


def take_part_in_export(model: Llama) -> None:
    """In a run of several processes, what each process but the exporting one does while that one runs
    ``export_hf`` of the same ``model``: fetch every tensor in the order the export writes them, so that the
    exporter can gather the parts this process's devices hold (``layout.on_host``); nothing is written."""
    for tensor in hf_tensors(model.config).values():
        tensor.to_hf(our_tensor(model, tensor.ours))


class _Recorded(Directory):
    """A bucket prefix that remembers the keys written to it, to delete them when the export fails."""

    def __init__(self, location: Location):
        super().__init__(location)
        self.written: list[str] = []

    def write_bytes(self, key: str, data: bytes | bytearray) -> None:
        self.written.append(key)  # before the request: a write that fails midway is deleted too
        super().write_bytes(key, data)

    def delete_written(self) -> None:
        """Delete what was written, newest first; stop at the first delete the store refuses."""
        with contextlib.suppress(StorageError):
            for key in reversed(self.written):
                self.delete(key)


def _write(
    out: Directory,
    model: Llama,
    tokenizer: str | Path | Location | None,
    dtype: str,
    eos_token: str | None,
    stop_ids: tuple[int, ...],
    chat: ChatRecipe | None,
    max_shard_bytes: int,
) -> None:
    """Every file of the export into ``out``, ``config.json`` last."""
    config = model.config
    special = SpecialTokens(None, None)
    if tokenizer is not None:
        special = write_tokenizer_files(
            tokenizer, out, model_max_length=config.max_seq_len, eos_token=eos_token, chat=chat
        )
    first = [] if special.eos_token_id is None else [special.eos_token_id]
    stops = list(dict.fromkeys(first + list(stop_ids)))
    eos = stops if len(stops) > 1 else special.eos_token_id  # one id as a number, as exports have always had
    generation = {"eos_token_id": eos, "do_sample": False}
    if special.bos_token_id is not None:
        generation["bos_token_id"] = special.bos_token_id
    _write_json(out, "generation_config.json", generation)
    _write_weights(model, out, dtype, max_shard_bytes)
    fields = hf_config(config, dtype=dtype, bos_token_id=special.bos_token_id, eos_token_id=eos)
    _write_json(out, "config.json", fields)


def _write_json(out: Directory, key: str, fields: dict) -> None:
    out.write_text(key, json.dumps(fields, indent=2) + "\n")


def _write_weights(model: Llama, out: Directory, dtype: str, max_shard_bytes: int) -> None:
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
    write_safetensors(out, plan, fetch, max_shard_bytes=max_shard_bytes)
