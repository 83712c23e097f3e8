"""Hugging Face exports during a run (``trainer.export_every``): every N steps, and at the last step, the
weights (their moving average with ``optimizer.ema``) as a Hugging Face directory in ``<run dir>/hf/step-N``
that transformers, vLLM and lm-eval load as it is (Levanter's ``hf_save_steps``, Marin's
``steps_per_export``).

Each export is ``hf.export.export_hf``'s, streamed: one tensor at a time is copied off the devices, cast and
written before the next (host memory: the largest tensor, plus in a bucket the shard being assembled);
the model is neither copied nor moved. In a run of several processes every process takes part in
gathering each tensor and the first one writes. An export found whole at its step (a resumed run passing
the step again) is kept; what a killed export left in a bucket (no ``config.json``) is deleted first.

>>> from meltemi.trainer.config import RunConfig
>>> config = RunConfig(trainer={"export_every": 40, "num_train_steps": 100})
>>> exports = HfExports.of(config, "memory://doc/run", None)
>>> [step for step in range(1, 101) if exports.due(step)]
[40, 80, 100]
"""

from __future__ import annotations

import dataclasses

import jax

from meltemi.datastore.errors import DatastoreError
from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.config import RunConfig
from meltemi.trainer.data.run_data import RunData
from meltemi.trainer.hf.config_map import HfFormatError
from meltemi.trainer.hf.export import export_hf, export_target, take_part_in_export
from meltemi.trainer.run_directory import RunDirectory
from meltemi.trainer.step.distributed import agree
from meltemi.trainer.step.train_step import TrainState


@dataclasses.dataclass(frozen=True)
class HfExports:
    """When a run exports its weights and what goes with them: its tokenizer copy, its end of text and
    stop ids, and a chat run's template (as ``apps/export_hf.py`` writes them from a checkpoint)."""

    every: int | None
    last_step: int
    dtype: str
    directory: RunDirectory
    data: RunData | None
    tokenizer: bool

    @staticmethod
    def of(config: RunConfig, directory: str | Location | RunDirectory, data: RunData | None) -> HfExports:
        trainer = config.trainer
        return HfExports(trainer.export_every, trainer.num_train_steps, trainer.export_dtype,
                         RunDirectory.of(directory), data, config.data.tokenizer is not None)  # fmt: skip

    def due(self, step: int) -> bool:
        """Whether the weights after ``step`` steps are exported: every ``every`` steps and at the last."""
        return self.every is not None and (step % self.every == 0 or step == self.last_step)

    def export(self, state: TrainState, step: int) -> str:
        """Export ``state``'s weights (the average's when it keeps one) as those of ``step``, on every process
        of the run together; what became of it, in a line. A target that cannot be written is said and
        skipped (the run goes on); a failure while writing stops the run."""
        model, which = state.trained, ("weights" if state.ema is None else "EMA weights")
        target = self.directory.hf_export(step)
        writer = jax.process_index() == 0
        there, problem = False, None
        if writer:
            try:
                there = _prepared(target)
            except (HfFormatError, DatastoreError, OSError) as error:
                problem = f"{target}: {error}"
        there, failed = agree([there, problem is not None])
        if failed:
            return f"step {step}: not exported ({problem or 'the first process could not write there'})"
        if there:
            return f"step {step}: {target} was exported before; kept"
        if not writer:
            take_part_in_export(model)
            return f"step {step}: exported its {which} to {target}"
        data = self.data
        export_hf(
            model,
            target,
            tokenizer=self.directory.location / RunDirectory.TOKENIZER if self.tokenizer else None,
            dtype=self.dtype,
            eos_token=None if data is None else data.end_of_text.token,
            stop_ids=() if data is None else data.end_of_text.stop_ids,
            chat=None if data is None else data.chat,
        )
        return f"step {step}: exported its {which} to {target}"


def _prepared(target: Location) -> bool:
    """Whether a whole export is at ``target`` already (its ``config.json``, written last); else the target
    made ready: what a killed export left in a bucket deleted, then checked as ``export_hf`` checks it."""
    directory = Directory(target)
    if directory.exists("config.json"):
        return True
    if target.local_path is None and directory.list():
        directory.delete_prefix()
    export_target(target)
    return False
