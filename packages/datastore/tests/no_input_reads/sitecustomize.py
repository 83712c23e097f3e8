"""Loaded by a dry run under test (on its PYTHONPATH, with MELTEMI_NO_INPUT_READS=1): opening any file named
`*.jsonl` then fails the process, so a dry run that reads an input instead of listing it is caught. Anywhere
else (imported for its doctests, say) it changes nothing."""

import builtins
import io
import os

_open = builtins.open


def _guarded(file, *args, **kwargs):
    if isinstance(file, str | os.PathLike) and os.fspath(file).endswith(".jsonl"):
        raise SystemExit(f"a dry run opened an input: {os.fspath(file)}")
    return _open(file, *args, **kwargs)


if os.environ.get("MELTEMI_NO_INPUT_READS") == "1":
    builtins.open = io.open = _guarded
