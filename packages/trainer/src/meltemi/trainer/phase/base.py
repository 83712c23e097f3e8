"""A new phase's base, located and checked: another run's checkpoint (a run directory's latest good one, or
a ``step-N`` directory) or a Hugging Face directory (``config.json``, safetensors weights,
``tokenizer.json``), local or in a bucket.

The base says the model's shape and the tokenizer; a config that cannot start from it (another width,
depth, heads, positions) is refused naming the field, before anything is built or written. A config
without a tokenizer takes the base's; one with a tokenizer must use the base's ids (the same tokens, or
the same with tokens appended, as a chat template's are).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from meltemi.datastore.errors import DatastoreError, StorageError
from meltemi.datastore.hub_cache import not_cached
from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.checkpoint.checkpointer import BREAKING_FIELDS, inspect_checkpoint
from meltemi.trainer.checkpoint.format import Manifest
from meltemi.trainer.checkpoint.trained_model import checkpoint_tokenizer, locate_model
from meltemi.trainer.config import ModelConfig, RunConfig
from meltemi.trainer.config_io import validate
from meltemi.trainer.data.chat import AUTO_TEMPLATE
from meltemi.trainer.data.run_tokenizer import tokenizer_at
from meltemi.trainer.errors import CheckpointError, ConfigError
from meltemi.trainer.hf.config_map import HfFormatError
from meltemi.trainer.hf.load import read_hf_config
from meltemi.trainer.hf.model_files import CONFIG as HF_CONFIG
from meltemi.trainer.hf.model_files import has_chat_template

FIELD = "trainer.initialize_from"
TOKENIZER = "tokenizer.json"
# What a base and the config it starts may differ in: the vocabulary (a chat template's tokens appended)
# and the dtype parameters are kept in (cast on restore).
MAY_DIFFER = ("model.vocab_size", "trainer.param_dtype")


@dataclasses.dataclass(frozen=True)
class Base:
    """Where a phase starts: a checkpoint (``step`` and its ``manifest``) or a Hugging Face directory
    (``hf_dir``, local or in a bucket, read in place), with the base's model shape and where its tokenizer
    file lies (a path, or a URL in the base's bucket; None when it has none)."""

    kind: Literal["checkpoint", "huggingface"]
    where: str
    model: ModelConfig
    tokenizer: str | None
    step: Directory | None = None
    manifest: Manifest | None = None
    hf_dir: Directory | None = None


def locate_base(path: str, warn: Callable[[str], object] = lambda _: None) -> Base:
    """The base ``path`` names: a Hugging Face directory when it holds ``config.json`` and no checkpoint, else
    a run directory's latest readable checkpoint or a ``step-N`` directory; a ``CheckpointError`` naming
    ``path`` when it is neither."""
    try:  # a missing bucket, an unreachable endpoint or a file in the way: said at once
        found = locate_model(path)
    except StorageError as e:
        raise CheckpointError(f"{FIELD}: {e}") from None
    except CheckpointError as e:
        local = Location.parse(path).local_path
        if local is not None and local.is_file():  # a weights file named instead of its directory
            raise CheckpointError(f"{FIELD}: {e}") from None
        found = []
    if isinstance(found, Directory):
        try:
            model = read_hf_config(found)
        except HfFormatError as e:
            raise ConfigError(f"{FIELD}: {path}: {e}") from None
        tokenizer = found.where(TOKENIZER) if found.exists(TOKENIZER) else None
        return Base("huggingface", path, model, tokenizer, hf_dir=found)
    for step in found:
        try:
            manifest = inspect_checkpoint(step)
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            continue
        config = validate(manifest.config, where=step.where("manifest.json"), recorded=True)
        tokenizer, _ = checkpoint_tokenizer(step, manifest)
        return Base("checkpoint", step.where(), config.model, tokenizer, step=step, manifest=manifest)
    if found:
        raise CheckpointError(f"{FIELD}: {path} holds no usable checkpoint")
    local = Location.parse(path).local_path
    if local is not None and not local.exists():
        raise CheckpointError(
            f"{FIELD}: {path}: no such run or directory{not_cached(path, 'model')} (train the base first, "
            "e.g. uv run apps/pretrain.py, or name another with --base)"
        )
    raise CheckpointError(
        f"{FIELD}: {path} is neither a run (no checkpoints/step-N), a step-N checkpoint nor a Hugging Face "
        f"directory (no {HF_CONFIG}): give the base run, checkpoint or export to start from"
    )


def base_template(base: Base) -> str | None:
    """The base's own chat template as ``data.chat.template`` names it: a Hugging Face directory that has
    one, or the template a chat run's checkpoint records (``recorded_template``); None when the base has
    none."""
    if base.kind == "huggingface":
        return base.hf_dir.where() if has_chat_template(base.hf_dir) else None
    return recorded_template(base.step, base.manifest)


def recorded_template(step: Directory, manifest: Manifest) -> str | None:
    """The chat template the checkpoint ``step`` records (None for a run that saw no conversation), as
    ``data.chat.template`` names it: as its run named it when that still reads as the same template (so a
    resumed run records the config an uninterrupted one does), else the checkpoint itself, whose manifest
    records the template whole in a chat store's form (``datastore.chat.recipe.load_template`` reads it
    there): nothing is written to be named again, and a run goes on with the template it trained with
    whether or not the file or base it came from is still there."""
    from meltemi.datastore.chat.recipe import load_template

    if manifest.chat is None:
        return None
    named = manifest.config.get("data", {}).get("chat", {}).get("template")
    if named is not None and named != AUTO_TEMPLATE:
        try:
            same = load_template(named)
        except DatastoreError:
            same = None
        recorded = manifest.chat.template
        if same is not None and (same.text, same.special_tokens) == (recorded.text, recorded.special_tokens):
            return named
    return step.where()


def recorded_base(saved_config: dict) -> str | None:
    """The base a checkpoint's run was started from, as its saved config (a manifest's) names it; None for
    a run started from no base.

    >>> recorded_base({"trainer": {"initialize_from": {"path": "runs/tiny"}}})
    'runs/tiny'
    >>> recorded_base({"trainer": {"initialize_from": None}}) is None
    True
    """
    return (saved_config.get("trainer", {}).get("initialize_from") or {}).get("path")


def check_resumed_base(step: Directory, manifest: Manifest, path: str) -> None:
    """A ``ConfigError`` when the run's own checkpoint ``step`` (which it resumes from, never reading its
    base) was started from another base than ``path``: going on would report or extend the other base's
    run under this one's name (``apps/sft.py --base B`` in the directory of a fine-tuning of A). Two
    spellings of one place are the same base."""
    earlier = recorded_base(manifest.config)
    if earlier is not None and Location.parse(earlier) == Location.parse(path):
        return
    started = "from no base" if earlier is None else f"from {earlier}"
    keep = "without a base" if earlier is None else f"from {earlier} (as the base)"
    raise ConfigError(
        f"{FIELD}: {step.where()} was started {started}, not from {path}: train in another directory "
        f"(--run-dir DIR) to start from {path}, or go on with this run {keep}"
    )


def check_shape(base: Base, config: RunConfig) -> None:
    """A ``ConfigError`` naming the first field of the model's shape the config sets unlike the base."""
    ours = config.model.model_dump(mode="json")
    theirs = base.model.model_dump(mode="json")
    for dotted in BREAKING_FIELDS:
        section, field = dotted.split(".")
        if dotted in MAY_DIFFER or section != "model":
            continue
        if ours[field] != theirs[field]:
            raise ConfigError(
                f"{dotted}: the base {base.where} has {theirs[field]}, the config {ours[field]}; "
                "give a config "
                "of the base's shape (--config, or --model.* overrides)"
            )


def check_tokenizer(base: Base, tokenizer: str, config: RunConfig) -> None:
    """A ``ConfigError`` unless ``tokenizer`` gives every token of the base's tokenizer the base's id (it may
    add tokens after them), and the config's vocabulary is the base's or that tokenizer's."""
    if base.tokenizer is None:
        return
    theirs = tokenizer_at(base.tokenizer, ConfigError, f"the base {base.where}").get_vocab(
        with_added_tokens=True
    )
    ours = tokenizer_at(tokenizer, ConfigError, "data.tokenizer").get_vocab(with_added_tokens=True)
    moved = next((token for token, i in theirs.items() if ours.get(token) != i), None)
    if moved is not None:
        raise ConfigError(
            f"data.tokenizer: {tokenizer} is not the tokenizer of the base {base.where}: token "
            f"{moved!r} has id "
            f"{ours.get(moved)} there, {theirs[moved]} in the base; leave data.tokenizer unset to "
            "use the base's"
        )
    vocab = config.model.vocab_size
    if vocab != base.model.vocab_size and vocab != len(ours):
        raise ConfigError(
            f"model.vocab_size: the base {base.where} has {base.model.vocab_size}, the config "
            f"{vocab}; leave it "
            "at the base's (a chat template's new tokens grow it by themselves)"
        )
