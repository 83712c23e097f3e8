"""The run directory, checked before any work: a command that cannot write its run learns it before the
data is built or a model compiled."""

from meltemi.datastore.errors import StorageError
from meltemi.datastore.storage import Location, check_readable, check_writable
from meltemi.trainer.errors import TrainerError


def check_run_dir(run_dir: Location) -> None:
    """Fail at once, in one line, where ``run_dir`` cannot be used: a bucket is probed with a write (a
    missing bucket, refused keys, no endpoint; a ``StorageError``); a local directory, made only once the
    run is accepted, is listed (a file in its way: a ``TrainerError``).

    >>> import tempfile
    >>> check_run_dir(Location.parse(tempfile.mkdtemp() + "/run"))  # not there yet: fine
    """
    if not run_dir.is_local:
        check_writable(run_dir)
        return
    try:
        check_readable(run_dir)
    except StorageError as e:
        raise TrainerError(f"run directory {run_dir}: cannot write there ({e})") from None
