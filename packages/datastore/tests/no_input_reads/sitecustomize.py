"""Loaded by a dry run under test (PYTHONPATH): opening any file named `*.jsonl` fails the process, so a
dry run that reads an input instead of listing it is caught."""

import builtins
import io
import os

_open, _io_open = builtins.open, io.open


def _guarded(file, *args, **kwargs):
    if isinstance(file, str | os.PathLike) and os.fspath(file).endswith(".jsonl"):
        raise SystemExit(f"a dry run opened an input: {os.fspath(file)}")
    return _open(file, *args, **kwargs)


builtins.open = io.open = _guarded
