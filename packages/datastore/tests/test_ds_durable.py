"""Every file the build renames into place reached the disk first, so a crash never leaves an empty one."""

import os

from meltemi.datastore import build_store


def test_every_file_a_build_renames_into_place_was_flushed_to_disk_first(
    tmp_path, write_files, tokenizer_path, monkeypatch
):
    files = write_files({"a.jsonl": '{"text": "one"}\n{"text": "two"}\n', "b.txt": "three"})
    flushed_inodes: set[int] = set()
    renamed: dict[str, bool] = {}
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        flushed_inodes.add(os.fstat(descriptor).st_ino)
        return real_fsync(descriptor)

    def replace(source, target):
        renamed[os.fspath(target)] = os.stat(source).st_ino in flushed_inodes
        return real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    build_store(files, tokenizer_path, tmp_path / "store", progress=False, unit_bytes=1)
    parts = [target for target in renamed if "/parts/" in target]
    assert len(parts) == 9  # three units (two lines of a.jsonl, b.txt): tokens, lengths, summary each
    assert [target for target, flushed in renamed.items() if not flushed] == []
