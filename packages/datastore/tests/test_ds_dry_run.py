"""`build --dry-run`: a build planned from its listing alone, before it reads, tokenizes or writes."""

import os
import subprocess
import sys

import pytest

from meltemi.datastore import build_store
from meltemi.datastore.build.dry_run import estimate_build, object_size, plan_build
from meltemi.datastore.build.inputs.files import describe_source
from meltemi.datastore.build.plan import plan_units
from meltemi.datastore.build.request import BuildRequest
from meltemi.datastore.build.units import TokenizerInfo
from meltemi.datastore.storage import Directory


def test_the_estimate_counts_the_units_the_plan_makes_for_the_same_files(stdlib_files, tokenizer_path):
    request = BuildRequest(tuple(stdlib_files), tokenizer_path, "unused", unit_bytes=20_000)
    sources = [describe_source(f, split_bytes=request.unit_bytes) for f in sorted(stdlib_files)]
    info = TokenizerInfo.load(tokenizer_path)
    planned = plan_units(info, sources, request.options(), "build")
    estimate = estimate_build(sorted(stdlib_files), unit_bytes=20_000, workers=3)
    assert estimate.units == len(planned.units) and estimate.input_bytes == sum(s.size for s in sources)
    assert estimate.files == len(stdlib_files) and not estimate.sizes_estimated
    assert estimate.workers == 3 and estimate.seconds == pytest.approx(estimate.tokens / (3 * estimate.rate))


def test_a_synthetic_listing_of_terabytes_is_planned_without_reading_a_byte(tmp_path, tokenizer_path):
    """2,000 sparse JSONL files of about 100 MB (200 GB listed, nothing on disk): units follow the sizes, the
    inputs are never opened (an open fails the run: `no_input_reads`), nothing is written."""
    corpus = tmp_path / "dclm"
    for i in range(2000):
        shard = corpus / f"global-shard_{i // 500:02d}" / f"shard_{i:06d}.jsonl"
        shard.parent.mkdir(parents=True, exist_ok=True)
        with open(shard, "wb") as f:
            f.truncate(100_000_000 + i)
    out = tmp_path / "store"
    command = [sys.executable, "-m", "meltemi.datastore", "build", "--input", str(corpus), "--tokenizer"]
    command += [tokenizer_path, "--out", str(out), "--dry-run", "--nodes", "8", "--cores-per-node", "16"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=_without_reads())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"output: {out} (empty: a new store)"
    assert lines[1] == "inputs: 2,000 files, 200GB"
    units = int(lines[2].split()[1].replace(",", ""))
    whole = 100_000_000 // (4 << 20)  # each file's pieces of a whole unit; the rest joins the next file's
    assert 2000 * whole <= units <= 2000 * (whole + 1)
    assert lines[3] == "workers: 128 (8 nodes of 16 cores)"
    assert not out.exists()


def _without_reads() -> dict[str, str]:
    """The environment of a dry run whose `open` of an input would fail the run (sitecustomize)."""
    path = os.pathsep.join([_GUARD_DIR, os.environ.get("PYTHONPATH", "")])
    return os.environ | {"PYTHONPATH": path, "MELTEMI_NO_INPUT_READS": "1"}


_GUARD_DIR = os.path.join(os.path.dirname(__file__), "no_input_reads")


@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_bucket_objects_size_is_found_by_ranged_reads(request, server):
    fake = request.getfixturevalue(server)
    there = Directory(f"{fake.scheme}://{fake.make_bucket()}/listed")
    empty = (0,) if server == "s3" else ()  # the GCS emulator fails on an empty upload (GCS takes one)
    for size in (*empty, 1, 2, 5, 1000, 4097):
        there.write_bytes(f"o{size}", os.urandom(size))
        assert object_size(there.where(f"o{size}")) == size


def test_the_dry_run_says_what_the_output_holds(tmp_path, stdlib_files, tokenizer_path):
    out = tmp_path / "store"
    request = BuildRequest(tuple(stdlib_files[:3]), tokenizer_path, str(out))
    assert plan_build(request)[0].endswith("(empty: a new store)")
    build_store(stdlib_files[:3], tokenizer_path, out, progress=False)
    assert "a store is built there" in plan_build(request)[0]
    assert plan_build(request, nodes=2, cores_per_node=4)[3] == "workers: 8 (2 nodes of 4 cores)"
