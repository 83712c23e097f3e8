"""The checks a trained model's location passes before anything is read from it: a Hub name resolved to this
machine's cache, a file, a bucket that cannot be listed and a path that does not exist refused in one line.
Light to import (storage and errors, no JAX), so an app given a bad ``--checkpoint`` says so in a fraction
of a second instead of after loading its generation stack; ``trained_model.locate_model`` starts with it.
"""

from __future__ import annotations

import os

from meltemi.datastore.hub_cache import local_or_cached, not_cached
from meltemi.datastore.storage import Location, check_readable
from meltemi.trainer.errors import CheckpointError


def checked_location(location: str | os.PathLike | Location) -> str | Location:
    """``location`` (a path, a URL, or a model's Hub name, resolved to its snapshot in this machine's cache)
    once it may hold a model: a ``CheckpointError`` when it is a file or a local path that does not exist, a
    ``StorageError`` when its bucket cannot be read. Whether it holds checkpoints or a Hugging Face model is
    ``locate_model``'s question.

    >>> checked_location("/no/such/run")
    Traceback (most recent call last):
    ...
    meltemi.trainer.errors.CheckpointError: /no/such/run does not exist
    >>> checked_location("memory://runs/tiny")
    'memory://runs/tiny'
    """
    given = location
    if isinstance(location, str | os.PathLike):
        location = local_or_cached(os.fspath(location), "model")
    local = Location.parse(location).local_path
    if local is not None and local.is_file():
        raise CheckpointError(
            f"{location} is a file, not a run, step-N or Hugging Face directory: give the directory, "
            f"{local.parent}"
        )
    check_readable(location)  # a missing bucket or refused credentials: one line, before anything else
    if local is not None and not local.exists():
        raise CheckpointError(f"{location} does not exist{not_cached(os.fspath(given), 'model')}")
    return location
