"""The persistent compilation cache: on by default, where the user or the environment says, off on request;
a second identical process loads what the first compiled and trains to the same bits."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from meltemi.datastore.storage import Directory, Location
from meltemi.trainer.checkpoint.checkpointer import inspect_checkpoint
from meltemi.trainer.checkpoint.format import read_array
from meltemi.trainer.command import parse_command
from meltemi.trainer.config_io import dump_config
from meltemi.trainer.step.cache_mirror import CacheMirror, MirrorChoice, choose_mirror
from meltemi.trainer.step.compile_cache import CacheChoice, choose_cache, enable
from meltemi.trainer.step.fake_devices import with_fake_devices


def test_the_directory_is_the_configs_then_the_environments_then_the_users_cache():
    env = {"JAX_COMPILATION_CACHE_DIR": "/env/jax", "XDG_CACHE_HOME": "/xdg"}
    assert choose_cache(env, directory="/mine") == CacheChoice("/mine", "trainer.compile_cache_dir")
    assert choose_cache(env) == CacheChoice("/env/jax", "$JAX_COMPILATION_CACHE_DIR")
    assert choose_cache({"XDG_CACHE_HOME": "/xdg"}).directory == "/xdg/meltemi/jax"
    home = choose_cache({}).directory
    assert home == os.path.join(os.path.expanduser("~"), ".cache", "meltemi", "jax")
    assert choose_cache(env, directory="/mine", enabled=False).directory is None


def test_no_compile_cache_is_the_config_field_it_stands_for():
    command = parse_command(["--run-dir", "r", "--no-compile-cache", "--trainer.seed", "1"])
    assert command.run_dir == "r"
    assert command.overrides == ("--trainer.compile_cache", "false", "--trainer.seed", "1")


def test_a_directory_that_cannot_be_made_turns_the_cache_off_saying_why(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    choice = enable(CacheChoice(str(tmp_path / "file" / "jax"), "trainer.compile_cache_dir"))
    try:
        assert choice.directory is None and choice.reason.startswith(f"cannot create {tmp_path / 'file'}")
        assert choice.describe().startswith("compilation cache off (cannot create")
        monkeypatch.chdir(tmp_path)
        slip = enable(choose_cache({"JAX_COMPILATION_CACHE_DIR": "gs:/bucket/jax"}))
        assert slip.describe() == (
            "compilation cache off ($JAX_COMPILATION_CACHE_DIR: gs:/bucket/jax: a URL needs two slashes "
            "after its scheme: gs://bucket/jax)"
        )
        assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]  # no local directory gs:
    finally:
        enable(choose_cache())  # back to this session's cache for the tests after this one


def test_without_a_threshold_in_the_environment_programs_over_50_ms_are_kept(monkeypatch, tmp_path):
    import jax

    from meltemi.trainer.step.compile_cache import MIN_COMPILE_SECONDS

    monkeypatch.delenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", raising=False)
    try:
        enable(CacheChoice(str(tmp_path / "jax"), "trainer.compile_cache_dir"))
        assert jax.config.jax_persistent_cache_min_compile_time_secs == MIN_COMPILE_SECONDS == 0.05
    finally:
        enable(choose_cache())  # back to this session's cache for the tests after this one


def cache_entries(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("*-cache")}


def train(config_path: Path, run_dir: Path | str, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    """``python -m meltemi.trainer`` on one device with ``cache``, keeping every program it compiles (the
    suite's own cache settings are left out of its environment). With the trainer's 0.05 s threshold, a
    program compiling in about that long would be kept by one process and not by another, as load varies."""
    ours = ("JAX_PERSISTENT_CACHE", "JAX_COMPILATION")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env.update(XLA_FLAGS=with_fake_devices(1), JAX_COMPILATION_CACHE_DIR=str(cache))
    env.update(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    where = ["--config", str(config_path), "--run-dir", str(run_dir), *extra]
    done = subprocess.run(
        [sys.executable, "-m", "meltemi.trainer", *where],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done


def final_arrays(run_dir: Path | str, step: int) -> dict[str, bytes]:
    step_dir = f"{run_dir}/checkpoints/step-{step}"
    return {r.name: read_array(step_dir, r).tobytes() for r in inspect_checkpoint(step_dir).arrays}


@pytest.mark.slow
def test_a_second_identical_process_loads_every_program_and_trains_to_the_same_bits(make_config, tmp_path):
    config_path = tmp_path / "config.yaml"
    config_path.write_text(dump_config(make_config("--trainer.num_train_steps", "2")))
    cache = tmp_path / "jax"
    first = train(config_path, tmp_path / "first", cache)
    written = cache_entries(cache)
    # The init, train and eval programs and every smaller one; none for the checkpoint's fingerprints, which a
    # model this small sums on the host (`digests.on_host`).
    names = {entry.rsplit("-", 2)[0] for entry in written}
    assert {"jit_in_mapping", "jit_init_state"} <= names and "jit_array_sums" not in names, sorted(written)
    assert re.search(
        rf"compilation cache {cache} \(\$JAX_COMPILATION_CACHE_DIR\): cached \d+ new", first.stderr
    )

    second = train(config_path, tmp_path / "second", cache)
    assert cache_entries(cache) == written  # every program had the same key here: nothing new was written
    reused = re.search(r"^ready in [\d.]+ s: .*reused (\d+) cached program", second.stderr, re.MULTILINE)
    assert reused and int(reused.group(1)) >= 2, second.stderr  # the init state and the train step
    assert final_arrays(tmp_path / "second", 2) == final_arrays(tmp_path / "first", 2)

    off = train(config_path, tmp_path / "off", tmp_path / "unused", "--no-compile-cache")
    assert "compilation cache off (trainer.compile_cache: false)" in off.stderr
    assert not (tmp_path / "unused").exists()
    assert final_arrays(tmp_path / "off", 2) == final_arrays(tmp_path / "first", 2)


def test_a_replacement_host_with_an_empty_cache_fetches_the_runs_programs_from_its_bucket(
    s3, make_config, tmp_path
):
    """A run in a bucket mirrors its compiled programs beside it; a new host (another, empty local cache at
    another path) resumes the preempted run with them: it fetches every one, compiles nothing, and trains
    to the same bits."""
    config_path = tmp_path / "config.yaml"
    config = make_config("--trainer.num_train_steps", "4", "--trainer.checkpoint_every", "2")
    config_path.write_text(dump_config(config))
    bucket = s3.make_bucket()
    run = f"s3://{bucket}/runs/tiny"
    first = train(config_path, run, tmp_path / "host-1")
    mirror = Directory(f"s3://{bucket}/meltemi-compile-cache")
    written = cache_entries(tmp_path / "host-1")
    assert {key for key in mirror.list()} == written and len(written) >= 2
    assert f"mirrored in s3://{bucket}/meltemi-compile-cache (0 fetched, " in first.stderr

    trained_by_the_first = final_arrays(run, 4)
    preempted = Directory(f"{run}/checkpoints")
    preempted.delete_prefix("step-4/")  # as if the host was lost before its last checkpoint
    second = train(config_path, run, tmp_path / "host-2")
    assert "resuming from" in second.stderr, second.stderr
    assert cache_entries(tmp_path / "host-2") == written  # every program came from the bucket
    ready = re.search(
        r"^ready in [\d.]+ s: .*\((\d+) fetched, (\d+) uploaded\): reused (\d+)", second.stderr, re.M
    )
    assert ready, second.stderr
    assert (int(ready.group(1)), int(ready.group(2))) == (len(written), 0)  # none compiled, none new
    assert int(ready.group(3)) >= 1  # the train step at least
    assert final_arrays(run, 4) == trained_by_the_first  # programs from the bucket: the same bits

    preempted.delete_prefix("step-4/")
    off = train(config_path, run, tmp_path / "host-3", "--trainer.compile_cache_mirror", "false")
    assert "mirrored in" not in off.stderr and "cached" in off.stderr


@pytest.mark.parametrize("scheme", ["s3", "gcs"])
def test_the_mirror_copies_only_whole_entries_each_way_once(request, scheme, tmp_path):
    server = request.getfixturevalue(scheme)
    url = f"{server.bucket_url()}/meltemi-compile-cache"
    here = tmp_path / "here"
    here.mkdir()
    mirror = CacheMirror(here, Directory(url))
    (here / "a-cache").write_bytes(b"program a")
    (here / "a-atime").write_bytes(time.time_ns().to_bytes(8, "little"))  # JAX's bookkeeping: not uploaded
    (here / ".lockfile").write_bytes(b"")
    assert mirror.push() == 1
    Directory(url).write_bytes("b-cache", b"program b")
    there = CacheMirror(tmp_path / "there", Directory(url))
    assert there.pull() == 2 and there.pull() == 0 and there.push() == 0
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == [
        "a-atime",
        "a-cache",
        "b-atime",
        "b-cache",
    ]
    assert (tmp_path / "there" / "b-cache").read_bytes() == b"program b"
    assert sorted(Directory(url).list()) == ["a-cache", "b-cache"]


def test_the_mirror_uploads_only_the_programs_this_run_used(s3, tmp_path):
    """A shared local cache holds other runs' programs too: only the entries JAX stamped since the mirror
    opened (compiled or loaded by this run) go to the bucket; without JAX's stamps (no eviction) every one."""
    url = f"s3://{s3.make_bucket()}/meltemi-compile-cache"
    here = tmp_path / "here"
    here.mkdir()
    for key in ("other-run", "compiled", "loaded", "unstamped"):
        (here / f"{key}-cache").write_bytes(key.encode())
    stamp = {key: here / f"{key}-atime" for key in ("other-run", "compiled", "loaded")}
    stamp["other-run"].write_bytes(time.time_ns().to_bytes(8, "little"))
    stamp["loaded"].write_bytes(time.time_ns().to_bytes(8, "little"))
    mirror = CacheMirror(here, Directory(url))
    for key in ("compiled", "loaded"):
        stamp[key].write_bytes(time.time_ns().to_bytes(8, "little"))
    assert mirror.push() == 3
    assert sorted(Directory(url).list()) == ["compiled-cache", "loaded-cache", "unstamped-cache"]


def test_the_mirror_is_beside_the_run_in_its_bucket_unless_the_setting_says_otherwise():
    run = Location.parse("gs://my-bucket/runs/8b")
    assert choose_mirror(None, run) == MirrorChoice(
        "gs://my-bucket/meltemi-compile-cache", "beside the run, in its bucket"
    )
    assert choose_mirror("s3://other/cache/", run) == MirrorChoice(
        "s3://other/cache", "trainer.compile_cache_mirror"
    )
    assert choose_mirror(False, run).where is None
    assert choose_mirror(None, Location.parse("runs/tiny")).where is None


def test_an_unreachable_mirror_is_found_at_its_first_request_not_after_minutes_of_retries(
    s3, monkeypatch, tmp_path
):
    """The run goes on without the mirror (the trainer says so); it should not first wait out the default
    retries' backoff, as it did (six minutes) before the first compilation."""
    import socket

    from meltemi.datastore.errors import UnreachableError
    from meltemi.datastore.storage import PROBE_RETRIES, retried_requests

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
    mirror = CacheMirror(tmp_path, Directory("s3://unreachable/meltemi-compile-cache"))
    retried = retried_requests()
    with pytest.raises(UnreachableError, match="cannot be reached"):
        mirror.pull()
    assert retried_requests() - retried <= PROBE_RETRIES.max_retries
