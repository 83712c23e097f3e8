"""Where an evaluation's JSON results go (``apps/evaluate.py --out``), checked before any task runs: a new
file, local or in a bucket, in a folder that can be written. An existing file is never replaced (the results
it holds are another evaluation's) and a directory is not a file; each is one line naming the target.

>>> target = results_file("memory://doc/evals/results.json")
>>> target.write("{}\\n"); str(target)
'memory://doc/evals/results.json'
>>> results_file("memory://doc/evals/results.json")
Traceback (most recent call last):
...
meltemi.trainer.harness.errors.ResultsFileError: --out memory://doc/evals/results.json: already exists; name a
new file (the results there are kept)
"""

from __future__ import annotations

import dataclasses

from meltemi.datastore.errors import NotAFileError
from meltemi.datastore.storage import Directory, file_to_write
from meltemi.trainer.harness.errors import ResultsFileError


@dataclasses.dataclass(frozen=True)
class ResultsFile:
    """One object in a folder that was probed writable, and that held no object of that name then."""

    folder: Directory
    name: str

    def __str__(self) -> str:
        return self.folder.where(self.name)

    def write(self, text: str) -> None:
        """Write ``text`` as the whole object (a local file is written aside and renamed); a file that has
        appeared there since the check is kept and this is a ``ResultsFileError``."""
        if self.folder.exists(self.name):
            raise ResultsFileError(f"--out {self}: appeared while evaluating; the results there are kept")
        self.folder.write_text(self.name, text)


def results_file(out: str) -> ResultsFile:
    """``out`` as a new results file: its folder probed (a ``StorageError`` naming the mistake), and a
    ``ResultsFileError`` for a target that names a folder (``evals/``, a directory) or an existing file."""
    try:
        folder, name = file_to_write(out, "results.json")  # the seam's error for a bad URL or bucket
    except NotAFileError as e:
        raise ResultsFileError(f"--out {e}") from None
    if folder.exists(name):
        raise ResultsFileError(f"--out {out}: already exists; name a new file (the results there are kept)")
    return ResultsFile(folder, name)
