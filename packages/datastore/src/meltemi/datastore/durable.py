"""Durable writes: write aside, flush to disk, rename into place, and flush the directory too.

After a crash a file written this way is either absent or whole, never renamed but empty: the data reach
the disk before the rename, and the rename before the function returns.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> None:
    """Call ``write(f)`` on a file beside ``path``, then make it ``path`` durably (readers see all or none).

    >>> import pathlib, tempfile
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "done.txt"
    >>> write_atomically(target, lambda f: f.write(b"all of it"))
    >>> target.read_bytes(), sorted(p.name for p in target.parent.iterdir())
    (b'all of it', ['done.txt'])
    """
    path = Path(path)
    aside = path.with_name(f".{path.name}.partial")
    with open(aside, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(aside, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
