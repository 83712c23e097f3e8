"""Builds on a real Ray cluster (a head and worker nodes of one CPU, each its own raylet on loopback): the
same objects, byte for byte, as a one-host build, in an S3 or GCS bucket or on a shared disk; a node or the
driver killed mid-build costs only the units it was running; a second build of a bucket store is refused
naming the first, and a fresh build keeps its lease to its end; an address with no cluster is one line. A
Hypothesis property (no cluster) checks that any worker count, any order of completion and any hash block
size give the same bytes and hashes.

One cluster serves the module (starting raylets is the slow part); the tests that use it share one xdist
worker. The test that kills a node adds that node first, so the cluster is whole after it.
"""

import functools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meltemi.datastore import TokenStore, audit_store, build_store, corpora, layout
from meltemi.datastore.build import assembly, builder
from meltemi.datastore.build.assembly import content_hash
from meltemi.datastore.build.executors import InProcess
from meltemi.datastore.build.lease import LEASE_KEY, Lease
from meltemi.datastore.errors import BuildInProgressError
from meltemi.datastore.storage import Directory
from meltemi.datastore.testing import RAY_DRIVER_ENVIRON, LocalRayCluster, environ_with

CLUSTER = pytest.mark.xdist_group("datastore-ray")
# A killed node is declared dead after 3 health checks a second apart missed (Ray's default: 5, 3 s apart).
FAST_NODE_DEATH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}
WORKER_NODES = 2
SMALL = {"unit_bytes": 8_000, "chunk_tokens": 256, "shard_tokens": 1024}  # ~20 units, 5 segments of tokens


def bucket_objects(url: str) -> dict[str, bytes]:
    directory = Directory(url)
    return {key: directory.read_bytes(key) for key in directory.list()}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


NEEDS_RAY = "ray is not installed: building on a cluster needs the datastore's [ray] extra"


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 120.0, every: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s")
        time.sleep(every)
    return found


@pytest.fixture(scope="module")
def cluster(s3_server, gcs_server) -> Iterator[LocalRayCluster]:
    """A head without CPUs and two worker nodes of one CPU, their workers reaching both emulators."""
    pytest.importorskip("ray", reason=NEEDS_RAY)
    environ = s3_server.environ | gcs_server.environ | {"GOOGLE_APPLICATION_CREDENTIALS": None}
    with LocalRayCluster(workers=WORKER_NODES, environ=environ, system_config=FAST_NODE_DEATH) as running:
        yield running


@pytest.fixture(scope="module")
def small_reference(tmp_path_factory, stdlib_files, tokenizer_path) -> Path:
    """The one-host build (this process, `workers=1`) that the cluster's builds of 20 files must equal."""
    out = tmp_path_factory.mktemp("reference") / "store"
    report = build_store(stdlib_files[:20], tokenizer_path, out, workers=1, progress=False, **SMALL)
    assert report.repeated_units == 0 and report.where == "this process"
    return out


@CLUSTER
@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_cluster_build_into_a_bucket_is_the_one_host_store_object_for_object(
    request, server, cluster, stdlib_files, tokenizer_path, small_reference, tree_bytes
):
    """The manifest records nothing of where the tasks ran (no host, worker count or order), so every
    object is equal, the manifest too; the tasks ran on both nodes, the tokens' shards in 5 segments."""
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/stores/web"
    report = build_store(
        stdlib_files[:20], tokenizer_path, url, cluster=cluster.address, progress=False, **SMALL
    )
    assert report.where == f"the Ray cluster at {cluster.address} ({WORKER_NODES} CPUs)"
    assert report.nodes == WORKER_NODES and report.repeated_units == 0
    objects, reference = bucket_objects(url), tree_bytes(small_reference)
    assert sorted(objects) == sorted(reference)
    shards = [key for key in reference if key.startswith("tokens/c/")]
    assert len(shards) > 2 * 64, "several segments of 64 shards"
    assert {key: objects[key] for key in shards} == {key: reference[key] for key in shards}
    assert objects == reference
    manifest = json.loads(objects["manifest.json"])
    assert manifest["content_sha256"] == TokenStore.open(small_reference).content_hash
    assert TokenStore.open(url, tokenizer=tokenizer_path).content_hash == manifest["content_sha256"]


@pytest.fixture(scope="module")
def large_inputs() -> list[str]:
    """120 standard-library files (2.2 MB): enough units for a node to die while running some."""
    return corpora.python_stdlib()[:120]


@pytest.fixture(scope="module")
def large_reference(tmp_path_factory, large_inputs, tokenizer_path) -> Path:
    out = tmp_path_factory.mktemp("large-reference") / "store"
    build_store(large_inputs, tokenizer_path, out, unit_bytes=100_000, progress=False)
    return out


# The marker of one attempt at a unit (`units.tokenize_units`): `.build/started/UNIT.HOST.PID.TOKEN`.
MARKER = re.compile(r"(?P<unit>\d{7})\.(?P<host>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}")


def units_of(keys: Sequence[str], suffix: str = "") -> set[int]:
    """The units that `.build/started/` markers or `.build/parts/` objects (ending in `suffix`) name."""
    return {int(Path(key).name.split(".")[0]) for key in keys if key.endswith(suffix)}


@CLUSTER
def test_a_node_killed_mid_build_costs_only_the_units_it_was_running(
    cluster, tmp_path, large_inputs, large_reference, tokenizer_path, tree_bytes
):
    """A third node joins, and is killed (SIGKILL to its workers and raylet) as soon as one of its workers
    has started a unit it has not finished: Ray runs that unit again on another node, the build ends equal
    to the one-host store, and the report counts the unit as run twice."""
    victim = cluster.add_node()
    out = tmp_path / "store"
    started, parts = out / ".build" / "started", out / ".build" / "parts"
    outcome: dict[str, Any] = {}

    def build() -> None:
        try:
            outcome["report"] = build_store(
                large_inputs, tokenizer_path, out, unit_bytes=100_000, cluster=cluster.address, progress=False
            )
        except BaseException as error:  # handed to the test's thread
            outcome["error"] = error

    def running_on_victim() -> tuple[set[int], set[int]]:
        """The units the node's workers started, and those of them without a part yet."""
        markers = [MARKER.fullmatch(p.name) for p in started.glob("*")]  # not the files written aside
        pids = LocalRayCluster.worker_pids(victim) if markers else set()
        units = {int(m["unit"]) for m in markers if m is not None and int(m["pid"]) in pids}
        return units, {u for u in units if not (parts / f"{u:07d}.json").exists()}

    thread = threading.Thread(target=build)
    thread.start()
    ran: set[int] = set()
    in_flight: set[int] = set()
    try:
        while thread.is_alive() and not in_flight:
            ran, in_flight = running_on_victim()
            time.sleep(0.002)
    finally:
        cluster.kill_node(victim)  # whatever happened: the cluster is whole again for the other tests
        thread.join(timeout=180)
    assert in_flight, "the build ended before the new node started a unit"
    assert not thread.is_alive() and "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert tree_bytes(out) == tree_bytes(large_reference)
    assert report.repeated_units >= len(in_flight) >= 1, "the unit the node was running ran again"
    assert report.repeated_units <= len(ran), "only units the lost node had started ran twice"
    assert "ran more than once (a worker lost)" in report.summary()
    assert len(cluster.nodes) == WORKER_NODES


@CLUSTER
def test_a_node_killed_during_the_assembly_costs_only_its_segments_and_the_store_is_whole(
    cluster, tmp_path, large_inputs, tokenizer_path, tree_bytes
):
    """A third node joins and is killed as the assembly begins (the arrays' metadata is written just before
    the segments' tasks start; with shards of 1,024 tokens there are more segments than CPUs, so the node is
    most likely running one, though the test cannot see which node runs a task): whatever it was running Ray
    runs again elsewhere, each segment rewriting whole shards, and the store ends equal to the one-host
    build, every shard and hash checked by an audit."""
    options = {"unit_bytes": 100_000, "chunk_tokens": 256, "shard_tokens": 1024}
    reference = tmp_path / "reference"
    build_store(large_inputs, tokenizer_path, reference, progress=False, **options)
    victim = cluster.add_node()
    out = tmp_path / "store"
    outcome: dict[str, Any] = {}

    def build() -> None:
        try:
            outcome["report"] = build_store(
                large_inputs, tokenizer_path, out, cluster=cluster.address, progress=False, **options
            )
        except BaseException as error:  # handed to the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=build)
    thread.start()
    try:
        assembling = wait_until(lambda: (out / "tokens" / "zarr.json").exists() or not thread.is_alive(), "")
    finally:
        cluster.kill_node(victim)
        thread.join(timeout=180)
    assert assembling and not thread.is_alive() and "error" not in outcome, outcome.get("error")
    assert tree_bytes(out) == tree_bytes(reference)
    audit_store(TokenStore.open(out))
    assert len(cluster.nodes) == WORKER_NODES


DRIVER = """
import sys
from meltemi.datastore import build_store
*files, tokenizer, out, address = sys.argv[1:]
build_store(files, tokenizer, out, unit_bytes=20_000, cluster=address, progress=False)
"""


@CLUSTER
def test_a_driver_killed_mid_build_is_resumed_by_a_rerun_that_skips_the_finished_parts(
    cluster, s3, large_inputs, tokenizer_path, tmp_path, tree_bytes
):
    """The build's driver (its own process, connected to the cluster) is SIGKILLed once a few parts are in
    the bucket; a rerun from another process finishes the store, equal to a one-host build, starting only
    the units without a part: those the killed driver had started and not finished are the only repeats."""
    reference = tmp_path / "reference"
    build_store(large_inputs, tokenizer_path, reference, unit_bytes=20_000, progress=False)
    url = f"{s3.bucket_url()}/stores/driver-killed"
    environ = environ_with(s3) | RAY_DRIVER_ENVIRON
    command = [sys.executable, "-c", DRIVER, *large_inputs, tokenizer_path, url, cluster.address]
    driver = subprocess.Popen(command, env=environ, stderr=subprocess.PIPE, text=True)
    build = Directory(url)
    try:
        wait_until(
            lambda: driver.poll() is not None or len(build.list(".build/parts/")) >= 3 * 4,
            "four parts in the bucket",
        )
    finally:
        driver.kill()
        _, stderr = driver.communicate()
    assert driver.returncode == -signal.SIGKILL, stderr

    def settled() -> list[str] | None:  # the dead driver's tasks are ended by Ray: wait until none writes
        before = build.list(".build/")
        time.sleep(0.3)
        return before if build.list(".build/") == before else None

    keys = wait_until(settled, "the killed driver's tasks to stop writing", every=0)
    units = len(json.loads(build.read_bytes(".build/plan.json"))["units"])
    began = units_of([k for k in keys if k.startswith(".build/started/")])
    finished = units_of([k for k in keys if k.startswith(".build/parts/")], ".json")
    assert "manifest.json" not in keys and 4 <= len(finished) < units, (len(finished), units)
    assert finished <= began

    report = build_store(
        large_inputs, tokenizer_path, url, unit_bytes=20_000, cluster=cluster.address, progress=False
    )
    assert not report.already_built and report.repeated_units == len(began - finished)
    assert bucket_objects(url) == tree_bytes(reference)


LEASE_HOLDER = """
import sys
from meltemi.datastore.build.lease import Lease
from meltemi.datastore.storage import Directory
with Lease(Directory(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


@CLUSTER
@pytest.mark.parametrize("server", ["s3", "gcs"])
def test_a_second_build_of_a_bucket_store_is_refused_naming_the_first(
    request, server, cluster, stdlib_files, tokenizer_path, small_reference, tree_bytes
):
    """Another process (the first build, as far as the store can tell) holds the store's lease: a build on
    the cluster is refused naming that process and its host, before writing anything; once the first ends,
    the same build runs."""
    fake = request.getfixturevalue(server)
    url = f"{fake.bucket_url()}/stores/web"
    first = subprocess.Popen(
        [sys.executable, "-c", LEASE_HOLDER, url],
        env=environ_with(fake),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout.readline() == "held\n"
        held = bucket_objects(url)
        with pytest.raises(BuildInProgressError) as refused:
            build_store(
                stdlib_files[:20], tokenizer_path, url, cluster=cluster.address, progress=False, **SMALL
            )
        holder = json.loads(held[".build/lease.json"])
        assert f"host {socket.gethostname()}, process {first.pid}, started {holder['started']}" in str(
            refused.value
        )
        assert "\n" not in str(refused.value)
        assert bucket_objects(url) == held, "the refused build wrote nothing"
    finally:
        first.communicate("")
    assert first.returncode == 0 and bucket_objects(url) == {}
    build_store(stdlib_files[:20], tokenizer_path, url, cluster=cluster.address, progress=False, **SMALL)
    assert bucket_objects(url) == tree_bytes(small_reference)


class LeaseWatcher(InProcess):
    """This process's executor, which looks for the build's lease before each job, and at the first
    tokenizing job runs `second` (a second build of the same store), keeping its error."""

    def __init__(self, out: str, second: Callable[[], Any] | None):
        self.out, self.second, self.seen, self.refusal = Directory(out), second, [], None

    def run(self, function: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> Iterator[Any]:
        for job in jobs:
            self.seen.append(self.out.exists(LEASE_KEY))
            if function.__name__ == "tokenize_units" and self.second is not None and self.refusal is None:
                with pytest.raises(BuildInProgressError) as refused:
                    self.second()
                self.refusal = str(refused.value)
            yield function(*job)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_fresh_build_keeps_its_lease_while_it_works(request, where, tmp_path, stdlib_files, tokenizer_path):
    """A new store's build holds its lease from the start to the end, renewed (every 20 ms here) without
    losing it, and in a bucket a second build started while it tokenizes is refused naming it (a local one
    is kept out by the directory's lock first). Clearing the output for a fresh build once deleted the lease
    it had just taken: every first build that ran past a renewal was refused at its end, and nothing kept a
    second build of a bucket store out."""
    files = stdlib_files[:12]
    if where == "local":
        out, second = str(tmp_path / "store"), None
    else:
        out = f"{request.getfixturevalue('s3').bucket_url()}/stores/web"

        def second() -> None:
            build_store(files, tokenizer_path, out, progress=False)

    watcher = LeaseWatcher(out, second)
    renewing = functools.partial(Lease, renew=0.02)
    with mock.patch.object(builder, "executor_for", lambda workers, cluster: watcher):
        with mock.patch.object(builder, "Lease", renewing):
            report = build_store(files, tokenizer_path, out, unit_bytes=8_000, progress=False)
    assert report.documents == 12 and len(watcher.seen) >= 3 and all(watcher.seen), watcher.seen
    if second is not None:
        assert f"host {socket.gethostname()}, process {os.getpid()}" in (watcher.refusal or "")
    assert not Directory(out).exists(LEASE_KEY) and Directory(out).exists("manifest.json")


NO_CLUSTER = """
import sys, time
from meltemi.datastore.cli import main
started = time.perf_counter()
code = main(sys.argv[1:])
print(f"{code} {time.perf_counter() - started:.2f}")
"""


@pytest.mark.parametrize("where", ["local", "s3", "auto"])
def test_an_address_with_no_cluster_is_one_line_in_seconds_and_writes_nothing(
    request, where, tmp_path, stdlib_files, tokenizer_path
):
    """`--ray 127.0.0.1:PORT` where nothing listens, or `--ray auto` where the address Ray would find
    (`RAY_ADDRESS`, or the one the last `ray start` recorded) is such: the build stops in seconds (not after
    Ray's minutes of retries) with one line naming the address, leaving no directory, object or lease."""
    pytest.importorskip("ray", reason=NEEDS_RAY)
    address = f"127.0.0.1:{free_port()}"
    environ, out = dict(os.environ) | RAY_DRIVER_ENVIRON, str(tmp_path / "made" / "store")
    given, named = address, address
    if where == "s3":
        s3 = request.getfixturevalue("s3")
        out, environ = f"{s3.bucket_url()}/stores/nowhere", environ_with(s3) | RAY_DRIVER_ENVIRON
    elif where == "auto":
        environ["RAY_ADDRESS"], given, named = address, "auto", f"auto ({address})"
    command = [sys.executable, "-c", NO_CLUSTER, "build", "--input", *stdlib_files[:3]]
    command += ["--tokenizer", tokenizer_path, "--out", out, "--ray", given]
    result = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=60)
    code, seconds = result.stdout.split()
    assert code == "1" and float(seconds) < 5.0, (code, seconds, result.stderr[-2000:])
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and result.stderr.startswith(
        f"error: no Ray cluster at {named}: nothing answers there"
    ), result.stderr
    if where == "s3":
        assert bucket_objects(out) == {}
    else:
        assert not (tmp_path / "made").exists()


# The property: no cluster, the jobs run here in an order Hypothesis chooses.


class ShuffledExecutor:
    """Runs every job in this process, in an order `order` draws anew for each batch of jobs, handing the
    results back in that order: as if `workers` workers finished them so."""

    def __init__(self, workers: int, order: random.Random):
        self.workers, self.order = workers, order

    def run(self, function: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> Iterator[Any]:
        jobs = list(jobs)
        self.order.shuffle(jobs)
        for job in jobs:
            yield function(*job)

    @property
    def where(self) -> str:
        return f"{self.workers} shuffled workers"

    @property
    def nodes(self) -> int:
        return 1

    def __enter__(self) -> "ShuffledExecutor":
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass


PROPERTY = {"unit_bytes": 3_000, "chunk_tokens": 32, "shard_tokens": 64}  # 6 segments of tokens


@pytest.fixture(scope="module")
def property_inputs(tmp_path_factory, stdlib_files, tokenizer_path) -> tuple[list[str], Path]:
    """Four source files and 1,500 short JSON lines (cut into several units), and their store built in
    this process in order: 24k tokens in 6 segments, 1.5k offsets."""
    root = tmp_path_factory.mktemp("property")
    lines = (json.dumps({"text": f"x{i} = {i} * {i % 13}"}) for i in range(1500))
    (root / "lines.jsonl").write_text("\n".join(lines) + "\n")
    inputs = [*stdlib_files[:4], str(root / "lines.jsonl")]
    build_store(inputs, tokenizer_path, root / "reference", progress=False, **PROPERTY)
    return inputs, root / "reference"


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workers=st.integers(1, 4),
    order=st.randoms(use_true_random=False),
    block=st.none() | st.integers(7, 30_000),
)
def test_any_worker_count_order_of_completion_and_hash_block_give_the_same_bytes(
    property_inputs, tokenizer_path, tmp_path_factory, workers, order, block
):
    """Units and segments done in any order, by any number of workers, make the reference's bytes. With
    another hash block (None: the real one), the arrays are the same bytes and each array's SHA-256 is
    composed from blocks of that size, however they straddle the tasks' segments."""
    inputs, reference = property_inputs
    out = tmp_path_factory.mktemp("shuffled") / "store"
    executor = ShuffledExecutor(workers, order)
    with mock.patch.object(builder, "executor_for", lambda workers, cluster: executor), hash_block(block):
        report = build_store(inputs, tokenizer_path, out, progress=False, **PROPERTY)
    assert report.where == f"{workers} shuffled workers" and report.repeated_units == 0
    built, expected = read_tree(out), read_tree(reference)
    if block is None:
        assert built == expected
        return
    assert sorted(built) == sorted(expected)
    assert {k: v for k, v in built.items() if k != "manifest.json"} == {
        k: v for k, v in expected.items() if k != "manifest.json"
    }
    manifest, original = json.loads(built["manifest.json"]), json.loads(expected["manifest.json"])
    store = TokenStore.open(reference)
    values = {"tokens": store.tokens[:], "offsets": store.offsets[:]}
    digests = {name: layout.array_sha256([v], 3, block=block) for name, v in values.items()}
    assert {name: manifest[name]["sha256"] for name in digests} == digests
    dtype = values["tokens"].dtype
    assert manifest["content_sha256"] == content_hash(dtype, digests["tokens"], digests["offsets"])
    assert f"blocks of {block} values" in manifest["checksums"]["per_array"]
    assert without_hashes(manifest) == without_hashes(original), "nothing else changes"
    if block < len(values["tokens"]):
        assert digests["tokens"] != original["tokens"]["sha256"]


def without_hashes(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest without what the hash block decides: the arrays' SHA-256s and what is made of them."""
    kept = {key: value for key, value in manifest.items() if key != "content_sha256"}
    for name in ("tokens", "offsets"):
        kept[name] = {key: value for key, value in manifest[name].items() if key != "sha256"}
    kept["checksums"] = {key: value for key, value in manifest["checksums"].items() if key != "per_array"}
    return kept


@contextmanager
def hash_block(block: int | None) -> Iterator[None]:
    """`HASH_BLOCK` set to `block` wherever it is read by name (the layout, the assembly, the builder)."""
    with ExitStack() as stack:
        for module in (layout, assembly, builder) if block is not None else ():
            stack.enter_context(mock.patch.object(module, "HASH_BLOCK", block))
        yield
