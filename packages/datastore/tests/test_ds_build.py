"""Building a store: Zarr v3 that zarr-python reads, same bytes for any worker count, resumable, atomic."""

import hashlib
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from meltemi.datastore import (
    BadLineError,
    IncompleteStoreError,
    SourceChangedError,
    TokenStore,
    build_store,
)
from meltemi.datastore.build.assembly import content_hash
from meltemi.datastore.build.units import TokenizerInfo
from meltemi.datastore.layout import array_sha256


@pytest.mark.filterwarnings("ignore:Object at manifest.json is not recognized")
def test_zarr_python_reads_the_same_tokens_and_offsets(small_store):
    store = TokenStore.open(small_store)
    group = zarr.open(small_store, mode="r")
    assert sorted(group.array_keys()) == ["offsets", "offsets_index", "tokens"]
    tokens, offsets = group["tokens"], group["offsets"]
    assert tokens.dtype == np.uint16 and offsets.dtype == np.uint64
    assert np.array_equal(tokens[:], store.tokens[:])
    assert np.array_equal(offsets[:], store.offsets[:])
    assert offsets[0] == 0 and offsets[-1] == store.num_tokens == tokens.shape[0]
    assert np.array_equal(group["offsets_index"][:], offsets[::1024])


def test_zarr_python_and_tensorstore_check_the_chunk_checksums_too(small_store, tmp_path):
    import shutil

    import tensorstore as ts

    copy = shutil.copytree(small_store, tmp_path / "copy")
    shard = copy / "tokens" / "c" / "1"
    data = bytearray(shard.read_bytes())
    data[5] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match="(?i)checksum|crc"):
        zarr.open_array(copy / "tokens", mode="r")[8000:8010]
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(copy / "tokens")}}
    with pytest.raises(ValueError, match="Digest mismatch"):
        ts.open(spec).result()[8000:8010].read().result()


def test_documents_are_the_tokenized_files_in_sorted_order_each_ending_in_eos(
    small_store, stdlib_files, tokenizer_path
):
    from tokenizers import Tokenizer

    store = TokenStore.open(small_store)
    manifest = json.loads((small_store / "manifest.json").read_text())
    tokenizer = Tokenizer.from_file(tokenizer_path)
    eos = manifest["tokenizer"]["eos_id"]
    assert [s["url"] for s in manifest["sources"]] == sorted(stdlib_files)
    kept = [f for f in sorted(stdlib_files) if open(f, "rb").read().strip()]
    assert store.num_docs == len(kept) == manifest["counts"]["documents"]
    for i in (0, len(kept) // 2, len(kept) - 1):
        text = open(kept[i], encoding="utf-8").read()
        expected = tokenizer.encode(text, add_special_tokens=False).ids + [eos]
        assert store.doc(i).tolist() == expected


def test_manifest_records_sources_tokenizer_layout_and_content_hashes(small_store, tokenizer_path):
    manifest = json.loads((small_store / "manifest.json").read_text())
    info = TokenizerInfo.load(tokenizer_path)
    assert manifest["tokenizer"]["sha256"] == info.sha256 and manifest["format_version"] == 3
    assert all(len(s["sha256"]) == 64 and s["size"] > 0 for s in manifest["sources"])
    store = TokenStore.open(small_store)
    assert manifest["tokens"] | {"sha256": None} == {
        "dtype": "uint16",
        "size": store.num_tokens,
        "chunk": 1000,
        "shard": 8000,
        "sha256": None,
    }
    tokens, offsets = store.tokens[:], store.offsets[:]
    tokens_sha, offsets_sha = array_sha256([tokens], 3), array_sha256([offsets], 3)
    assert tokens_sha != hashlib.sha256(tokens.astype("<u2").tobytes()).hexdigest()  # composed, not flat
    assert (manifest["tokens"]["sha256"], manifest["offsets"]["sha256"]) == (tokens_sha, offsets_sha)
    assert store.content_hash == content_hash(np.uint16, tokens_sha, offsets_sha)
    shards = sorted((small_store / "tokens" / "c").iterdir(), key=lambda p: int(p.name))
    assert [p.name for p in shards] == [str(i) for i in range(-(-store.num_tokens // 8000))]
    assert manifest["checksums"]["per_chunk"] == "crc32c"
    assert manifest["checksums"]["chunks"]["tokens"] == -(-store.num_tokens // 1000)
    assert len(json.dumps(manifest)) < 20_000, "grows with sources, not tokens"


def test_worker_counts_one_and_two_give_byte_identical_stores(
    tmp_path, stdlib_files, tokenizer_path, tree_bytes
):
    files = stdlib_files[:12]
    build_store(files, tokenizer_path, tmp_path / "one", workers=1, unit_bytes=20_000, progress=False)
    build_store(files, tokenizer_path, tmp_path / "two", workers=2, unit_bytes=20_000, progress=False)
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")


def test_rerunning_a_finished_build_is_a_no_op(tmp_path, stdlib_files, tokenizer_path):
    files = stdlib_files[:5]
    build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "s").rglob("*")}
    report = build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    assert report.already_built and "nothing to do" in report.summary()
    assert before == {p: p.stat().st_mtime_ns for p in (tmp_path / "s").rglob("*")}


def test_a_changed_source_stops_the_build_naming_the_file_unless_overwriting(
    tmp_path, write_files, tokenizer_path
):
    files = write_files({"a.txt": "alpha beta", "b.txt": "gamma delta"})
    build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    with open(files[1], "a") as f:
        f.write(" epsilon")
    with pytest.raises(SourceChangedError, match="b.txt changed"):
        build_store(files, tokenizer_path, tmp_path / "s", progress=False)
    report = build_store(files, tokenizer_path, tmp_path / "s", overwrite=True, progress=False)
    assert report.documents == 2 and not report.already_built
    assert TokenStore.open(tmp_path / "s").num_tokens == report.tokens


def test_changed_options_are_named_and_a_stopped_build_that_finished_no_unit_takes_new_ones(
    tmp_path, tokenizer_path
):
    good = [json.dumps({"text": f"def f{i}(x): return x"}) for i in range(40)]
    late, early = tmp_path / "late.jsonl", tmp_path / "early.jsonl"
    late.write_text("\n".join([*good, "{bad"]) + "\n")
    early.write_text("\n".join(["{bad", *good]) + "\n")
    build_store(str(late), tokenizer_path, tmp_path / "done", skip_bad_lines=True, progress=False)
    with pytest.raises(
        SourceChangedError, match=r"option chunk_tokens: 1024 then, 512 now; pass --overwrite"
    ):
        build_store(str(late), tokenizer_path, tmp_path / "done", skip_bad_lines=True, chunk_tokens=512,
                    progress=False)  # fmt: skip
    for data, out in ((late, tmp_path / "late"), (early, tmp_path / "early")):
        with pytest.raises(BadLineError):
            build_store(str(data), tokenizer_path, out, unit_bytes=200, progress=False)
    with pytest.raises(
        SourceChangedError, match=r"options chunk_tokens: 1024 then, 512 now; unit_bytes: 200 then, 300"
    ):
        build_store(
            str(late),
            tokenizer_path,
            tmp_path / "late",
            unit_bytes=300,
            chunk_tokens=512,
            skip_bad_lines=True,
            progress=False,
        )  # fmt: skip  (units were done under the old ones)
    with pytest.raises(SourceChangedError, match=r"tokenizer tokenizer.json: eos_id: 0 then, None now; pass"):
        build_store(str(late), tokenizer_path, tmp_path / "late", unit_bytes=200, eos=False, progress=False)
    report = build_store(str(early), tokenizer_path, tmp_path / "early", unit_bytes=200, chunk_tokens=512,
                         skip_bad_lines=True, progress=False)  # fmt: skip
    assert (
        report.documents == 40
        and TokenStore.open(tmp_path / "early").manifest["options"]["chunk_tokens"] == 512
    )


def test_a_source_named_through_a_link_is_the_file_it_names(tmp_path, write_files, tokenizer_path):
    files = write_files({"a.txt": "alpha beta", "b.txt": "gamma delta"})
    inputs = Path(files[0]).parent
    (tmp_path / "link").symlink_to(inputs, target_is_directory=True)
    build_store([str(inputs)], tokenizer_path, tmp_path / "s", progress=False)
    report = build_store([str(tmp_path / "link")], tokenizer_path, tmp_path / "s", progress=False)
    assert report.already_built
    (tmp_path / "z").symlink_to(inputs / "a.txt")  # now sorted after b.txt: another store
    with pytest.raises(SourceChangedError, match="named by other paths that put them in another order"):
        build_store([files[1], str(tmp_path / "z")], tokenizer_path, tmp_path / "s", progress=False)


def test_a_reader_never_opens_a_half_built_store(tmp_path, stdlib_files, tokenizer_path):
    out = tmp_path / "s"
    build_store(stdlib_files[:4], tokenizer_path, out, unit_bytes=1, progress=False)
    (out / "manifest.json").unlink()
    (out / ".build" / "parts").mkdir(parents=True)
    plan = {"units": [[0, 1], [1, 2]], "command": "python -m meltemi.datastore build --out X"}
    (out / ".build" / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(IncompleteStoreError, match=r"stopped after 0 of 2 units .* build --out X"):
        TokenStore.open(out)


KILLER = """
import sys
from meltemi.datastore import build_store
if __name__ == "__main__":
    build_store(sys.argv[1:-2], sys.argv[-2], sys.argv[-1], workers=1, unit_bytes=30_000, progress=False)
"""


@pytest.fixture(scope="module")
def killable_build(tmp_path_factory, stdlib_files, tokenizer_path):
    """The command of a build the tests below kill, and that build run once to the end (and its duration):
    every seed compares with the same store, so it is built once, not once per seed."""
    root = tmp_path_factory.mktemp("killable")
    (root / "build.py").write_text(KILLER)
    command = [sys.executable, str(root / "build.py"), *stdlib_files[:25], tokenizer_path]
    started = time.perf_counter()
    subprocess.run([*command, str(root / "reference")], check=True)
    return command, root / "reference", time.perf_counter() - started


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_build_killed_at_random_points_resumes_to_the_same_bytes(
    tmp_path, killable_build, tree_bytes, seed
):
    command, reference, duration = killable_build
    rng = random.Random(seed)
    out = tmp_path / "killed"
    process = subprocess.Popen([*command, str(out)])
    parts = out / ".build" / "parts"
    while process.poll() is None and len(list(parts.glob("*.json"))) < 2:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    if not (out / "manifest.json").exists():
        with pytest.raises(IncompleteStoreError, match=r"stopped after \d+ of \d+ units"):
            TokenStore.open(out)
    for _ in range(3):
        process = subprocess.Popen([*command, str(out)])
        try:
            process.wait(timeout=rng.uniform(0.2, duration))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
        if out.exists() and not (out / "manifest.json").exists():
            with pytest.raises(IncompleteStoreError):
                TokenStore.open(out)
    subprocess.run([*command, str(out)], check=True)
    assert tree_bytes(out) == tree_bytes(reference)


def test_the_chunk_size_changes_the_layout_but_never_the_tokens(tmp_path, stdlib_files, tokenizer_path):
    files = stdlib_files[:6]
    build_store(files, tokenizer_path, tmp_path / "big", progress=False)
    build_store(files, tokenizer_path, tmp_path / "tiny", chunk_tokens=7, shard_tokens=21, progress=False)
    big, tiny = TokenStore.open(tmp_path / "big"), TokenStore.open(tmp_path / "tiny")
    assert len(list((tmp_path / "tiny" / "tokens" / "c").iterdir())) == -(-tiny.num_tokens // 21)
    assert np.array_equal(big.tokens[:], tiny.tokens[:]) and np.array_equal(big.offsets[:], tiny.offsets[:])
    assert big.content_hash == tiny.content_hash
    starts = np.array([0, 5, 20, 999, tiny.num_tokens - 50])
    assert np.array_equal(big.read_ranges(starts, 50), tiny.read_ranges(starts, 50))


def test_a_shard_that_is_not_a_multiple_of_the_chunk_is_an_error(tmp_path, stdlib_files, tokenizer_path):
    with pytest.raises(ValueError, match="multiple of chunk_tokens"):
        build_store(stdlib_files[:2], tokenizer_path, tmp_path / "s", chunk_tokens=10, shard_tokens=25)
    assert not (tmp_path / "s").exists()


def test_a_second_build_of_the_same_store_while_one_runs_is_an_error_when_told_not_to_wait(
    tmp_path, stdlib_files, tokenizer_path
):
    import fcntl
    import os

    from meltemi.datastore import DatastoreError

    out = tmp_path / "store"
    build_store(stdlib_files[:3], tokenizer_path, out, progress=False)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    held = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(DatastoreError, match="another build of .* is running; wait for it"):
            build_store(stdlib_files[:4], tokenizer_path, out, overwrite=True, progress=False, wait=False)
    finally:
        os.close(held)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert build_store(stdlib_files[:4], tokenizer_path, out, overwrite=True, progress=False).documents == 4


def test_a_second_build_waits_for_the_one_running_then_uses_its_store(
    tmp_path, stdlib_files, tokenizer_path, capsys
):
    import fcntl
    import os
    import threading

    out = tmp_path / "store"
    first = build_store(stdlib_files[:3], tokenizer_path, out, progress=False)
    held = os.open(out, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first build, still running
    reports = []
    second = threading.Thread(
        target=lambda: reports.append(build_store(stdlib_files[:3], tokenizer_path, out, progress=True))
    )
    try:
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and not reports  # it waits while the lock is held
    finally:
        os.close(held)  # the first build ends
    second.join(timeout=60)
    assert not second.is_alive()
    assert reports[0].already_built and reports[0].tokens == first.tokens
    waited = capsys.readouterr().err
    assert f"another build of {str(out)!r} is running: waiting for it to finish" in waited
