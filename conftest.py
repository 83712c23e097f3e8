"""Session-wide test setup: 8 fake CPU devices, a shared compilation cache, Hypothesis profiles, hardware
markers, doctests, artifacts built once per session, the order in which the long tests start, and the
priority of the tests whose processes wait on one another.

This file is loaded before any test module (and before xdist starts its workers, which inherit the
environment), so XLA_FLAGS and the cache settings are in place before JAX is first imported anywhere.
"""

import contextlib
import fcntl
import functools
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from meltemi.datastore.testing import GcsServer, GoogleOAuth, S3Server

# XLA flags for every process of the run, each unless the environment already sets it: 8 fake CPU devices;
# XLA's backend optimization level 0, since the suite's programs are tiny and run a few times each, so
# LLVM's optimizations cost more than they save (a cold run of the tests' small trainer took 19.0
# CPU-seconds with them and 11.0 without, to the same losses); and XLA:CPU's older elemental emitters
# instead of its fusion emitters, which compile a small program in half the time (10.7 ms against 22.2 ms
# for a 3-operation program here) and ran the tests' trainer as fast: haliax-lite's tests took 152-166
# CPU-seconds with them and 198-228 without. The processes the tests start (trainers, apps, Ray workers)
# keep these flags too. Running them at XLA's default level instead was tried, for their longer runs: every
# process of a multi-process job other than the first compiles all it runs (docs/design.md), and the
# suite took 1,205 CPU-seconds instead of 1,091. Tests compare runs made under the same flags (a child with
# another device count changes only that one: ``meltemi.trainer.step.fake_devices``), and the flags are
# part of JAX's cache key, so these programs never mix with a user's.
# ``XLA_FLAGS=--xla_backend_optimization_level=3 uv run pytest`` runs the suite fully optimized.
_SUITE_XLA_FLAGS = {
    "--xla_force_host_platform_device_count": "8",
    "--xla_backend_optimization_level": "0",
    "--xla_cpu_use_fusion_emitters": "false",
}
_given = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(
    [_given, *(f"{flag}={value}" for flag, value in _SUITE_XLA_FLAGS.items() if flag not in _given)]
).strip()

# Every process of the run (xdist workers, the apps and trainers they start, Ray's workers) shares one JAX
# persistent compilation cache, so a program compiled by one test is loaded from disk by the next. It lives
# in the repository's ignored .cache/ and persists between runs; a fresh clone starts it empty. Programs
# compiling in under 0.3 s are not written: the suite's thousands of tiny ones would only fill it.
ROOT = Path(__file__).resolve().parent
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".cache" / "meltemi" / "jax-tests"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(8 * 2**30))  # also makes JAX lock the directory


# Python's bytecode, where the environment says not to write it (PYTHONDONTWRITEBYTECODE=1, as on this
# project's machines): a virtual environment that `uv sync` made holds none (uv compiles none unless told,
# so a fresh clone's has none), and every process of the run (xdist workers, the trainers and apps the
# tests start, Ray's workers, a hundred and more) would compile each module it imports from source again:
# `import jax, meltemi.trainer.trainer` took 3.4 CPU-s from source and 1.2 from bytecode, and a fresh
# clone's test_tr_preemption.py (12 trainer processes) 113 CPU-s against 83. The run's processes write it
# under the ignored .cache/ (PYTHONPYCACHEPREFIX, so nothing lands beside the sources), where
# the first process to import a module compiles it and the others load it; pytest keeps its rewritten test
# modules there too. A prefix the user sets is kept, and without PYTHONDONTWRITEBYTECODE Python caches as
# usual. The prefix replaces `__pycache__` for every module, so an environment compiled at install
# (`uv sync --compile-bytecode`, as .ci/run does) is left as it is.
def _environment_holds_bytecode() -> bool:
    """Whether the installed JAX was compiled to bytecode (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("jax")
    if spec is None or not spec.origin:
        return True
    return os.path.exists(importlib.util.cache_from_source(spec.origin))


if os.environ.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in os.environ:
    if not _environment_holds_bytecode():
        _PYCACHE = str(Path(__file__).resolve().parent / ".cache" / "meltemi" / "pycache")
        os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        sys.pycache_prefix = _PYCACHE  # this process's later imports too
    # Either way pytest's own processes write, so pytest keeps the test modules whose asserts it rewrote
    # (under the prefix above, else in `__pycache__` beside them); the processes the tests start follow the
    # environment. Unkept, every pytest process rewrote every test module it collected: 7.5 CPU-s of the
    # 21 each took to collect the whole suite here.
    sys.dont_write_bytecode = False

# Tests talk only to loopback: the harness reads only cached task data, and never probes the Hugging Face
# Hub (a test that wants the probe names an unreachable loopback HF_ENDPOINT and clears these itself).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

# A GPU test process allocates what it uses, not 75% of the GPU's memory as it starts (XLA's default): every
# xdist worker is one, and the 17 workers of `-n auto` on a 16-core GPU machine cannot each have that much.
# XLA_PYTHON_CLIENT_PREALLOCATE=true (or a memory fraction) set by the user still wins.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# JAX compiles on first use, so wall-clock deadlines would only measure compilation: none. `ci` (CI=true)
# runs 30 examples in a fixed order; `dev`, the default, 20 fresh ones each run. Tests that need more say
# so; tests/test_hypothesis_profiles.py shows both budgets catch plausible bugs.
settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile(
    "ci", max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") == "true" else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

_HARDWARE_MARKERS = ("gpu", "tpu")

# The accelerators are found once per session, by the first process (the xdist controller, before it starts
# its workers, which inherit its environment), and written here as the markers found, comma-separated ("" for
# none). A worker reads them: JAX starting a GPU backend in each of 17 workers during collection, each
# taking 75% of the memory, ended the session silently on a GPU machine. Set it yourself to skip detection.
ACCELERATORS_VARIABLE = "MELTEMI_TEST_ACCELERATORS"

_PROBE = """
import jax
for platform in ("gpu", "tpu"):
    try:
        if jax.devices(platform):
            print(platform)
    except RuntimeError:
        pass
"""


def _jax_may_find_accelerators() -> bool:
    """Whether an accelerator backend is installed for JAX (a PJRT plugin such as CUDA's or ROCm's, or
    libtpu), which a CPU-only machine tells without starting JAX."""
    import importlib.metadata
    import importlib.util

    if importlib.metadata.entry_points(group="jax_plugins"):
        return True
    return any(importlib.util.find_spec(name) is not None for name in ("jax_plugins", "libtpu"))


def _probe_accelerators() -> set[str]:
    """The hardware markers whose devices JAX finds, asked in a child process that then exits, so no test
    process holds a device it does not use (a TPU admits one process) or any GPU memory; a probe that
    fails says so on stderr and finds none."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        sys.stderr.write("conftest: JAX took over 300 s to list its devices; GPU and TPU tests are skipped\n")
        return set()
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        sys.stderr.write(
            f"conftest: JAX could not list its devices ({last}); GPU and TPU tests are skipped\n"
        )
        return set()
    return set(done.stdout.split()) & set(_HARDWARE_MARKERS)


def _available_accelerators() -> set[str]:
    """The hardware markers this session can run: found once (see ``ACCELERATORS_VARIABLE``), then read."""
    if ACCELERATORS_VARIABLE not in os.environ:
        count = os.environ.get("MELTEMI_COUNT_WORK")
        if count:
            _count_into(Path(count), "accelerators detected")
        found = _probe_accelerators() if _jax_may_find_accelerators() else set()
        os.environ[ACCELERATORS_VARIABLE] = ",".join(sorted(found))
    return {name for name in os.environ[ACCELERATORS_VARIABLE].split(",") if name}


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. The longest tests mostly wait on the processes they
    start (a Ray cluster's slices, gloo's deadline, killed and restarted trainers): the Ray group alone
    holds a worker for 5 to 6 minutes on 2 cores, and with one worker per core the other core then has
    half the suite's work to itself. On 2 cores, with the compilation cache warm, a third worker ran the
    suite in 622.7 s instead of 714.7 s; in a fresh clone (an empty cache, bytecode cached under .cache/),
    941 s with three workers against 1,314 s with two (both beside other work), the cores 96% busy with
    three. (Before bytecode was cached, CI's fresh run showed no gain: 1,051.5 s with three, 956.8 s and
    1,065.4 s with two.) A fourth has no core to use: with three, a fresh clone's run kept the machine
    97.7% busy on average (median 99% over 143 ten-second samples). Figures: benchmarks/RESULTS.md."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


# Each test module's tests run on one xdist worker, unless the module asks to be spread
# (``pytestmark = pytest.mark.spread``): their module fixtures are then made once, and the programs JAX
# traced and compiled for one test are in memory for the next (most tests of a module use the same shapes).
# A worker's own CPU is almost all compilation (trace, lower, XLA): in the libraries' tests, 1,102 s of
# compilation phases in 1,023 CPU-s of tests. Spread one test at a time, those tests compiled 5,239
# programs in 1,221 CPU-s (669.5 s); kept by module, 4,612 in 1,065 CPU-s (565.7 s), from an empty cache
# on 2 cores. Figures: benchmarks/RESULTS.md.
_SPREAD = "spread"


def _module_group(path: Path, root: Path) -> str:
    """The ``xdist_group`` of the tests of the module at ``path``: its path from the session's ``root``,
    dotted (no ``/``, by which the optional groups' list tells a group from a test's id)."""
    return ".".join(path.relative_to(root).parts if path.is_relative_to(root) else path.parts[1:])


@pytest.hookimpl(tryfirst=True)  # before xdist's worker appends each test's group to its id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each module's tests on one worker (above), start the long (``slow``) work first, and skip
    tests for hardware that is not attached.

    xdist hands out its work (a group's tests, or a single test) in this order (``--no-loadscope-reorder``,
    pyproject.toml): first the work holding a ``slow`` test, then the rest, each the most tests first, so a
    long test begins while the other workers still have short ones to fill in around it, instead of
    starting last and running alone. Work of the same kind and size keeps the order it was collected in.
    """
    for item in items:
        if _xdist_group(item) is None and item.get_closest_marker(_SPREAD) is None:
            item.add_marker(pytest.mark.xdist_group(_module_group(item.path, config.rootpath)))
    work: dict[str, list[pytest.Item]] = {}
    for item in items:
        work.setdefault(_xdist_group(item) or item.nodeid, []).append(item)
    slow = {name for name, tests in work.items() if any(test.get_closest_marker("slow") for test in tests)}
    order = sorted(work, key=lambda name: (name not in slow, -len(work[name])))  # stable: as collected
    items[:] = [item for name in order for item in work[name]]
    wanted = {m for item in items for m in _HARDWARE_MARKERS if item.get_closest_marker(m)}
    if not wanted:
        return
    available = _available_accelerators()
    for item in items:
        for marker in _HARDWARE_MARKERS:
            if item.get_closest_marker(marker) and marker not in available:
                item.add_marker(pytest.mark.skip(reason=f"needs a {marker.upper()}; none is attached"))


# Tests whose processes wait on one another: slices on a Ray cluster, JAX processes exchanging arrays
# through gloo. Their processes need a core the moment a peer answers, and under load they share the cores
# with every other process: two slice tests took 50 s alone and 433 s beside three CPU-bound processes
# (155 s with the tests at nice -10, 70 s with the others at nice 19), so these tests set the suite's
# length. Where the suite may raise priorities (root, or CAP_SYS_NICE), a worker runs these tests at
# nice -10 and the processes they start inherit it; it returns to where it started for any other test.
# Lowering the other tests' priority instead needs no privilege, but they then yield to anything else
# on the machine too: beside one CPU-bound process the suite took 1,159 s instead of 951 s.
_WAITING_GROUPS = frozenset({"raytpu-cluster", "multiprocess"})
_WAITING_NICENESS = -10
_STARTING_NICENESS = os.getpriority(os.PRIO_PROCESS, 0)


def _xdist_group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return None if marker is None else str(marker.args[0] if marker.args else marker.kwargs.get("name"))


def _set_own_priority(niceness: int) -> bool:
    """Set every thread of this process (XLA's pools included; later threads and child processes inherit
    it) to ``niceness``; False where that is not allowed (raising a priority needs privilege)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return False
    if os.getpriority(os.PRIO_PROCESS, 0) == niceness:
        return True
    for task in tasks.iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), niceness)
        except PermissionError:
            return False
        except ProcessLookupError:  # a thread that has ended since the listing
            continue
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """In an xdist worker, run the tests of ``_WAITING_GROUPS`` at a higher priority where that is allowed,
    and every other test at the priority the worker started with."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if _xdist_group(item) in _WAITING_GROUPS:
        _set_own_priority(min(_WAITING_NICENESS, _STARTING_NICENESS))
    else:
        _set_own_priority(_STARTING_NICENESS)


# An xdist worker has delivered everything by the time its session ends: each test's report as it ran, then
# the session's outcome ("workerfinished", sent when its pytest_sessionfinish returns); session fixtures were
# torn down after the last test. What a worker would still do is free its memory: pytest's collection of
# garbage at unconfigure (whose warnings no report carries any more), JAX's clearing of its backends at exit,
# then the interpreter's own teardown of a heap full of traced and compiled programs. That took 3.5 to 6
# CPU-seconds per worker after unconfigure, plus 2 to 3 after the last exit handler, and the controller waits
# for every worker to be gone before it prints the summary: about 10 s of every run's wall time, on 2 cores.
# So a worker ends at once when its session is over; MELTEMI_WORKER_FULL_EXIT=1 lets it exit as usual.
@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End an xdist worker as soon as its session is over (see above); the controller exits as usual."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None or os.environ.get("MELTEMI_WORKER_FULL_EXIT") == "1":
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(workeroutput.get("exitstatus", 0)))


def _source_module(path: Path) -> str | None:
    """The dotted name of a module under some `packages/<name>/src/`, or None for any other file."""
    parts = path.parts
    for i in range(len(parts) - 3, 0, -1):
        if parts[i] == "src" and parts[i - 2] == "packages":
            names = [*parts[i + 1 : -1], path.stem]
            return ".".join(names[:-1] if names[-1] == "__init__" else names)
    return None


@pytest.fixture(autouse=True)
def _doctest_temporary_files(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docstring example's temporary files (``tempfile.mkdtemp()``, as a user would write it) land in this
    run's temporary directory, which pytest prunes, not in the machine's for good: the examples left about 40
    directories in /tmp each run."""
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("doctest")))


def pytest_make_collect_report(collector: pytest.Collector) -> pytest.CollectReport | None:
    """A package module whose optional dependency is missing: its doctests are skipped, saying which.

    `--doctest-modules` imports every module under `packages/*/src`; one that imports an optional extra
    (say `ray`, in a trainer installed without it) would otherwise be a collection error. Only a missing
    *other* distribution is skipped this way: any other import error is reported as usual.
    """
    if not isinstance(collector, pytest.File):  # under src/, only --doctest-modules collects files
        return None
    name = _source_module(Path(collector.path))
    if name is None:
        return None
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        own = ".".join(name.split(".")[: 2 if name.startswith("meltemi.") else 1])  # meltemi: a namespace
        if not error.name or error.name == own or error.name.startswith(own + "."):
            return None
        reason = f"Skipped: {name} needs the optional module {error.name!r}, which is not installed"
        return pytest.CollectReport(collector.nodeid, "skipped", (str(collector.path), 0, reason), [])
    return None


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (stdlib only: the datastore wheel test has no filelock)."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SharedArtifacts:
    """Expensive things many tests only read (a trained run, a built store), built once per test session
    whichever xdist worker asks first; the others wait on a lock and reuse the result.

    A test that changes an artifact copies it first (``shutil.copytree``). A build that fails leaves nothing
    behind, so the next test to ask builds it again and sees the same error.
    """

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def get(self, name: str, build: Callable[[Path], object]) -> Path:
        """The directory ``name``, made by ``build(directory)`` the first time anyone in the session asks."""
        directory = self.root / name
        with _exclusive(self.root / f"{name}.lock"):
            if not (self.root / f"{name}.done").exists():
                shutil.rmtree(directory, ignore_errors=True)
                directory.mkdir()
                try:
                    build(directory)
                except BaseException:
                    shutil.rmtree(directory, ignore_errors=True)
                    raise
                (self.root / f"{name}.done").touch()
        return directory


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> SharedArtifacts:
    """Artifacts shared by every xdist worker of this session (see ``SharedArtifacts``)."""
    base = tmp_path_factory.getbasetemp()
    return SharedArtifacts((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared")


@pytest.fixture(scope="session")
def small_corpus(shared) -> dict[str, str]:
    """A 384-token BPE and a token store of the 120 smallest stdlib modules (about 150k tokens), built once
    per session for every package's tests and the integration tests."""
    from meltemi.datastore import build_store, corpora

    def build(root: Path) -> None:
        files = sorted(corpora.python_stdlib(), key=lambda p: (os.path.getsize(p), p))[:120]
        tokenizer = corpora.train_tokenizer(files, 384, root / "tokenizer.json")
        build_store(files, tokenizer, root / "store", progress=False)

    root = shared.get("stdlib-120-v384", build)
    return {"tokenizer": str(root / "tokenizer.json"), "store": str(root / "store")}


# ---- counting the suite's expensive work (opt-in: MELTEMI_COUNT_WORK=<file.jsonl>) -------------------------

_COUNTED = {  # what is counted: (module, attribute) -> the kind of work
    ("meltemi.trainer.trainer", "Trainer.run"): "training run (in process)",
    ("meltemi.trainer.step.program", "TrainProgram.compile"): "train step compiled (in process)",
    ("meltemi.raytpu.local_cluster", "LocalSliceCluster.__init__"): "Ray cluster started",
    ("meltemi.datastore.build.builder", "build_store"): "token store built (in process)",
    ("meltemi.datastore.corpora", "train_tokenizer"): "tokenizer trained (in process)",
}


def _count_into(log: Path, kind: str) -> None:
    with _exclusive(log.with_suffix(".lock")), open(log, "a", encoding="utf-8") as f:
        f.write(kind + "\n")


def _counting(original, log: Path, kind: str):
    @functools.wraps(original)  # keeps the signature, which some tests inspect
    def counted(*args, **kwargs):
        _count_into(log, kind)
        return original(*args, **kwargs)

    return counted


def pytest_configure(config: pytest.Config) -> None:
    """With ``MELTEMI_COUNT_WORK`` set, append one line per expensive piece of work to that file: training
    runs, train-step compilations, Ray clusters, store builds and tokenizer trainings in the test processes,
    and each trainer or app a test starts as a subprocess (counted by its command line).

    The first process of the session (not an xdist worker) also finds the accelerators here, before any
    worker starts (``ACCELERATORS_VARIABLE``); every process registers the ``spread`` mark."""
    config.addinivalue_line("markers", f"{_SPREAD}: a module's tests may run on any xdist worker (conftest)")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _available_accelerators()
    target = os.environ.get("MELTEMI_COUNT_WORK")
    if not target:
        return
    import subprocess

    log = Path(target)
    for (module_name, dotted), kind in _COUNTED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a package this environment does not have
            continue
        owner_name, _, attribute = dotted.rpartition(".")
        if owner_name:  # a method: the class is shared by every importer
            owner = getattr(module, owner_name)
            setattr(owner, attribute, _counting(getattr(owner, attribute), log, kind))
            continue
        original = getattr(module, attribute)  # a function: every module that imported it holds its own name
        wrapped = _counting(original, log, kind)
        for loaded in [m for name, m in sys.modules.items() if name.startswith("meltemi.")]:
            for name, value in list(vars(loaded).items()):
                if value is original:
                    setattr(loaded, name, wrapped)
    popen_init = subprocess.Popen.__init__
    apps = ("pretrain.py", "sample.py", "export_hf.py")

    def launched(self, args, *rest, **kwargs):
        words = [str(a) for a in (args if isinstance(args, (list, tuple)) else [args])]
        if "meltemi.trainer" in words or any(w.endswith(apps) for w in words):
            _count_into(log, "trainer or app subprocess")
        popen_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = launched


# ---- the tests an optional group would run (opt-in: MELTEMI_OPTIONAL_SKIPS=<file>) -------------------------

# The README's `uv run pytest` runs with the default groups; a test needing another (eval's lm-eval, torch's
# PyTorch) skips, saying which. CI runs that command first, exactly as a newcomer would, with this set; it
# then installs the optional groups and runs only the tests listed here (.ci/run), so none runs twice. A
# skip is listed by its reason: pytest's own for `importorskip` ("could not import ..."), or a test's own
# words, which must then say the module "is not installed" (a reason without them is never rerun).
_OPTIONAL_SKIP_WORDS = ("not installed", "could not import")


def _record_optional_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    target = os.environ.get("MELTEMI_OPTIONAL_SKIPS")
    if not target or os.environ.get("PYTEST_XDIST_WORKER") or not report.skipped:
        return
    reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(words in reason for words in _OPTIONAL_SKIP_WORDS):
        nodeid = re.sub(r"@[^@\[\]/:]+$", "", report.nodeid)  # xdist's `@group`: not part of a test's id
        with _exclusive(Path(target).with_suffix(".lock")), open(target, "a", encoding="utf-8") as f:
            f.write(nodeid + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record a test skipped for a missing optional module (``MELTEMI_OPTIONAL_SKIPS``)."""
    _record_optional_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Record a module skipped whole for a missing optional module (``MELTEMI_OPTIONAL_SKIPS``)."""
    _record_optional_skip(report)


# ---- object-storage servers on loopback, for every package's tests -----------------------------------------

# The servers are `meltemi.datastore.testing`'s (importable with the datastore alone); their fixtures live
# here, out of every wheel, so that no installed module imports pytest. This file is every test's conftest,
# the datastore's wheel tested alone included (.ci/check_wheels runs its tests from this checkout).


def _server_started(start, package: str):
    try:
        return start()
    except ImportError as error:
        pytest.skip(f"{package} is not installed (a development dependency: uv sync): {error}")


@pytest.fixture(scope="session")
def s3_server() -> Iterator["S3Server"]:
    """One S3 server per test process, on loopback."""
    from meltemi.datastore.testing import start_s3_server

    server = _server_started(start_s3_server, "moto[server]")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator["GcsServer"]:
    """One GCS emulator per test process, on loopback."""
    from meltemi.datastore.testing import start_gcs_server

    server = _server_started(start_gcs_server, "gcp-storage-emulator")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def google_oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator["GoogleOAuth"]:
    """Google's token endpoint on loopback, behind its HTTPS proxy (one per test process)."""
    from meltemi.datastore.testing import start_google_oauth

    oauth = _server_started(
        lambda: start_google_oauth(tmp_path_factory.mktemp("google-oauth")), "cryptography"
    )
    yield oauth
    oauth.stop()


@pytest.fixture
def quick_retries() -> Iterator[None]:
    """For one test, this process's TensorStore requests to S3 and GCS retry a transient error after
    milliseconds instead of seconds: the default retry policy (``DEFAULT_RETRIES``: 16 attempts, backoff
    from 0.5 s doubling to 32 s) with its backoff from 0.01 s doubling to 0.1 s, its attempts kept.

    A test of a flaky store (a proxy failing 5 or 10% of requests) otherwise spends most of its time
    asleep: 17 s of the datastore's 18 s build and read. What is retried, and how often, is the library's
    own policy still: a client that did not retry fails the test as before (an error, or no retries counted).
    """
    from meltemi.datastore.storage import DEFAULT_RETRIES

    saved = (DEFAULT_RETRIES.initial_delay_s, DEFAULT_RETRIES.max_delay_s)
    # The one policy object every `Directory` and `kvstore_spec` takes by default (a frozen dataclass).
    object.__setattr__(DEFAULT_RETRIES, "initial_delay_s", 0.01)
    object.__setattr__(DEFAULT_RETRIES, "max_delay_s", 0.1)
    try:
        yield
    finally:
        object.__setattr__(DEFAULT_RETRIES, "initial_delay_s", saved[0])
        object.__setattr__(DEFAULT_RETRIES, "max_delay_s", saved[1])


@pytest.fixture
def s3(s3_server: "S3Server", monkeypatch: pytest.MonkeyPatch) -> "S3Server":
    """The S3 server, with its environment set for this test."""
    for name, value in s3_server.environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return s3_server


@pytest.fixture
def gcs(gcs_server: "GcsServer", monkeypatch: pytest.MonkeyPatch) -> "GcsServer":
    """The GCS emulator, with its environment set for this test (the seam's mapping of
    `STORAGE_EMULATOR_HOST` to `TENSORSTORE_GCS_HTTP_URL` is undone after it)."""
    for set_by_the_seam in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING"):
        monkeypatch.setenv(set_by_the_seam, "")  # recorded, so the value the seam sets is undone
        monkeypatch.delenv(set_by_the_seam)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)  # a developer's own, not for it
    for name, value in gcs_server.environ.items():
        monkeypatch.setenv(name, value)
    return gcs_server
