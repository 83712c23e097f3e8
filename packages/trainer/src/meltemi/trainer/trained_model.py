"""A trained model read back from its run: the latest good checkpoint's parameters on one device, its
config, the run's own tokenizer (checked against the checkpoint) and its end-of-text token; what export,
sampling and evaluation start from.

    trained = load_model("runs/tiny")
    trained.model, trained.tokenizer, trained.end_of_text.id
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import jax

from meltemi.trainer.checkpoint_format import MANIFEST, Manifest
from meltemi.trainer.checkpoints import find_checkpoints, inspect_checkpoint, restore
from meltemi.trainer.config import RunConfig
from meltemi.trainer.errors import CheckpointError
from meltemi.trainer.llama import Llama
from meltemi.trainer.run_tokenizer import EndOfText, end_of_text, run_tokenizer

logger = logging.getLogger("meltemi.trainer")


@dataclasses.dataclass(frozen=True)
class TrainedModel:
    """A checkpoint's model and what using it needs: ``tokenizer`` is the run's copy (for checkpoints
    older than the copy, the path their config names; None without one)."""

    config: RunConfig
    model: Llama
    checkpoint: Path
    tokenizer: Path | None
    end_of_text: EndOfText


def checkpoint_tokenizer(path: Path, manifest: Manifest) -> tuple[Path | None, EndOfText]:
    """The tokenizer and end-of-text token of the checkpoint at ``path`` (a ``CheckpointError`` when the
    run's copy is missing or changed)."""
    if manifest.tokenizer is not None:
        tokenizer: Path | None = run_tokenizer(path.parent.parent, manifest.tokenizer)
    else:  # written before runs kept their tokenizer
        named = manifest.config.get("data", {}).get("tokenizer")
        tokenizer = None if named is None else Path(named)
    if manifest.end_of_text is not None:
        return tokenizer, manifest.end_of_text
    return tokenizer, end_of_text(tokenizer if tokenizer is not None and tokenizer.is_file() else None)


def load_model(location: str | Path, warn=logger.warning) -> TrainedModel:
    """The model of a run directory's latest good checkpoint, or of a ``step-N`` directory, on this
    process's first device.

    A location without any checkpoint is a ``CheckpointError`` naming it; damaged ones are skipped with a
    warning, as a resumption skips them.
    """
    import equinox as eqx

    from meltemi.trainer.config_io import validate

    location = Path(location)
    if not location.exists():
        raise CheckpointError(f"{location}: no such run or checkpoint directory")
    found = find_checkpoints(location)
    if not found:
        raise CheckpointError(f"{location} holds no checkpoint (looked for step-N directories)")
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    for path in found:
        try:
            manifest = inspect_checkpoint(path)
            config = validate(manifest.config, where=str(path / MANIFEST))
            abstract = eqx.filter_eval_shape(Llama.init, config.model, key=jax.random.key(0))
            shardings = jax.tree_util.tree_map(lambda _: device, abstract)
            model = restore(path, manifest, abstract, shardings, prefix="model.")
        except CheckpointError as e:
            warn(f"skipping checkpoint {e}")
            continue
        tokenizer, end = checkpoint_tokenizer(path, manifest)
        return TrainedModel(config, model, path, tokenizer, end)
    raise CheckpointError(f"{location}: no checkpoint there reads back whole")
