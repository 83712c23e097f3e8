"""A run directory made ready for a session, once its config is accepted (its checkpoint restored, or none
found): held by this run, the config and tokenizer written, the step records rewound to what this session
logs first, and the trackers opened. Nothing in the run directory changes before this.

A resumed session keeps the rows of the step it resumes from (it logs from the next one on); one that starts
at step 0 evaluates step 0 again, so it keeps none. Batch hashes are logged before each step, so the step
resumed from is hashed again. Only the first process writes; the others log nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from meltemi.datastore.errors import StorageError
from meltemi.trainer.config import RunConfig
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.data.run_tokenizer import TokenizerRecord, copy_into_run, file_sha256
from meltemi.trainer.errors import TrainerError
from meltemi.trainer.run.trackers import Trackers, rewind_record
from meltemi.trainer.run_directory import RunDirectory, RunLock


@dataclasses.dataclass
class SessionFiles:
    """What a session writes its run directory with: its ``trackers``, the ``tokenizer`` record its
    checkpoints keep (None for a run without a tokenizer), and the ``lock`` it holds (the first process's;
    None elsewhere) until ``close``."""

    trackers: Trackers
    tokenizer: TokenizerRecord | None
    lock: RunLock | None = None

    def close(self) -> None:
        """Close the trackers and let the run directory go."""
        self.trackers.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def open_session_files(
    directory: RunDirectory,
    config: RunConfig,
    start_step: int,
    *,
    resumed: bool,
    primary: bool,
    note: Callable[[str], None],
) -> SessionFiles:
    """``directory`` made ready for a session of ``config`` starting at ``start_step`` (``resumed`` from its
    own checkpoint or not), saying each rewound record with ``note``; a second run training there is refused
    before anything is written, and a directory that cannot be written is a ``TrainerError`` naming it.
    The tokenizer is copied into the run (a resumed run's copy must be the config's tokenizer)."""
    tokenizer = config.data.tokenizer
    if not primary:
        record = (
            None if tokenizer is None else TokenizerRecord(RunDirectory.TOKENIZER, file_sha256(tokenizer))
        )
        return SessionFiles(Trackers([]), record)
    first_logged = start_step + 1 if start_step else 0
    files, session = directory.files, SessionFiles(Trackers([]), None)
    try:
        session.lock = directory.hold()  # another run training here: refused, nothing written
        session.tokenizer = None if tokenizer is None else copy_into_run(tokenizer, files, resumed=resumed)
        files.write_text(RunDirectory.CONFIG, dump_config(config))
        for name, first in ((RunDirectory.METRICS, first_logged), (RunDirectory.BATCHES, start_step)):
            rewound = rewind_record(files, name, first)
            if rewound is not None:
                note(rewound.describe(files.where(name), first))
        session.trackers = Trackers.for_run(
            config.trainer.trackers, files, config.model_dump(mode="json"), first_logged
        )
        return session
    except BaseException as e:
        session.close()
        if isinstance(e, (OSError, StorageError)):
            said = e.strerror if isinstance(e, OSError) else str(e)
            raise TrainerError(f"run directory {directory.location}: cannot write there ({said})") from None
        raise
