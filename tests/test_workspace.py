"""The workspace keeps the layout and dependency rules of DESIGN.md.

An import against the dependency direction is a design bug, so it fails here rather than in review.
"""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "haliax-lite": ("haliax-lite", "haliax_lite"),
    "kernels": ("meltemi-kernels", "meltemi.kernels"),
    "datastore": ("meltemi-datastore", "meltemi.datastore"),
    "raytpu": ("meltemi-raytpu", "meltemi.raytpu"),
    "trainer": ("meltemi-trainer", "meltemi.trainer"),
}
WORKSPACE_MODULES = {module for _, module in PACKAGES.values()}
# For each package: the top-level modules it must never import (at any depth / at module level only).
FORBIDDEN_ANYWHERE = {
    "haliax-lite": WORKSPACE_MODULES - {"haliax_lite"},
    "kernels": WORKSPACE_MODULES - {"meltemi.kernels"},
    "datastore": (WORKSPACE_MODULES - {"meltemi.datastore"}) | {"jax", "jaxlib"},
    "raytpu": WORKSPACE_MODULES - {"meltemi.raytpu"},
    "trainer": {"apps"},
}
FORBIDDEN_AT_MODULE_LEVEL = {"raytpu": {"jax", "jaxlib"}}


def _imported_modules(tree: ast.AST, module_level_only: bool) -> set[str]:
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _matches(name: str, forbidden: set[str]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def violations(
    root: Path, package_dir: str, forbidden: set[str], module_level_only: bool = False
) -> list[str]:
    found = []
    for path in sorted((root / "packages" / package_dir / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for name in sorted(_imported_modules(tree, module_level_only)):
            if _matches(name, forbidden):
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


@pytest.mark.parametrize("package_dir", sorted(FORBIDDEN_ANYWHERE))
def test_imports_follow_the_dependency_direction(package_dir):
    assert violations(ROOT, package_dir, FORBIDDEN_ANYWHERE[package_dir]) == []


@pytest.mark.parametrize("package_dir", sorted(FORBIDDEN_AT_MODULE_LEVEL))
def test_no_jax_at_module_level(package_dir):
    assert violations(ROOT, package_dir, FORBIDDEN_AT_MODULE_LEVEL[package_dir], module_level_only=True) == []


def test_the_checker_sees_a_forbidden_import(tmp_path):
    bad = tmp_path / "packages" / "datastore" / "src" / "meltemi" / "datastore"
    bad.mkdir(parents=True)
    (bad / "leak.py").write_text("def f():\n    import jax.numpy as jnp\n    return jnp\n")
    expected = "packages/datastore/src/meltemi/datastore/leak.py imports jax.numpy"
    assert violations(tmp_path, "datastore", {"jax"}) == [expected]


# The trainer's stages, in the order their imports go (docs/design.md, "The trainer's layout"): a stage
# imports the foundation and the stages before it; only the composing modules import everything.
TRAINER_STAGES = ("model", "data", "step", "hf", "checkpoint", "run", "plan", "generate", "phase", "harness")
TRAINER_FOUNDATION = {
    "config", "config_io", "chips", "other_names", "flag_guess", "errors", "command", "adapters",
    "run_directory",
}  # fmt: skip
TRAINER_COMPOSERS = {"__init__", "__main__", "trainer", "cli", "launch"}


def stage_violations(root: Path) -> list[str]:
    """Imports inside the trainer that go against its stage order, and top-level modules in no stage."""
    package = root / "packages" / "trainer" / "src" / "meltemi" / "trainer"
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if len(parts) == 1 and parts[0] in TRAINER_COMPOSERS:
            continue
        if len(parts) == 1 and parts[0] not in TRAINER_FOUNDATION:
            found.append(f"{parts[0]}.py is in no stage: put it in one of {', '.join(TRAINER_STAGES)}")
            continue
        rank = TRAINER_STAGES.index(parts[0]) if len(parts) > 1 else -1
        for name in sorted(_imported_modules(ast.parse(path.read_text()), module_level_only=False)):
            target = name.split(".")[2] if name.startswith("meltemi.trainer.") else None
            if target in TRAINER_COMPOSERS or (
                target in TRAINER_STAGES and target != parts[0] and TRAINER_STAGES.index(target) > rank
            ):
                found.append(f"{'/'.join(parts)}.py imports {name}")
    return found


def test_the_trainer_stages_import_only_earlier_stages():
    assert stage_violations(ROOT) == []


def test_the_stage_checker_sees_a_backward_import_and_a_module_in_no_stage(tmp_path):
    package = tmp_path / "packages" / "trainer" / "src" / "meltemi" / "trainer"
    (package / "model").mkdir(parents=True)
    (package / "model" / "llama.py").write_text("from meltemi.trainer.step.train_step import TrainState\n")
    (package / "config.py").write_text("def f():\n    from meltemi.trainer.run import loop\n")
    (package / "stray.py").write_text("")
    assert stage_violations(tmp_path) == [
        "config.py imports meltemi.trainer.run",
        "model/llama.py imports meltemi.trainer.step.train_step",
        "stray.py is in no stage: put it in one of " + ", ".join(TRAINER_STAGES),
    ]


def test_meltemi_is_a_namespace_package():
    assert list(ROOT.glob("packages/*/src/meltemi/__init__.py")) == []


@pytest.mark.parametrize("package_dir", sorted(PACKAGES))
def test_package_metadata_is_complete(package_dir):
    dist, _ = PACKAGES[package_dir]
    project = tomllib.loads((ROOT / "packages" / package_dir / "pyproject.toml").read_text())["project"]
    assert project["name"] == dist
    assert project["license"] == "Apache-2.0"
    assert project["requires-python"] == ">=3.11"
    assert project["description"] and project["classifiers"]
    assert (ROOT / "packages" / package_dir / project["readme"]).is_file()
    assert (ROOT / "packages" / package_dir / "LICENSE").is_file()
    assert (ROOT / "packages" / package_dir / "tests").is_dir()


def test_root_project_depends_on_every_package():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [requirement.split("[")[0] for requirement in root["project"]["dependencies"]]  # extras aside
    assert sorted(names) == sorted(dist for dist, _ in PACKAGES.values())


# The opening of the inner suites that log where their tests ran: `record(*words)` appends a line of words
# to the file WORKERS_LOG names.
RECORDING = """
import os, time, pytest

def record(*words):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(" ".join(map(str, words)) + "\\n")
"""

GROUPED = (
    RECORDING
    + """
def priority():
    return os.getpriority(os.PRIO_PROCESS, 0)

@pytest.fixture(scope="module")
def built():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.xdist_group("multiprocess")
@pytest.mark.parametrize("i", range(4))
def test_in_the_group(built, i):
    assert built == os.environ["PYTEST_XDIST_WORKER"]
    record(built, priority())

@pytest.mark.parametrize("i", range(4))
def test_alone(i):
    record("alone", priority())
"""
)


RAISED_AND_BACK = """
import os, threading
import conftest

release = threading.Event()
other = threading.Thread(target=release.wait)
other.start()
def show():
    print(os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, other.native_id))
assert conftest._set_own_priority(min(conftest._WAITING_NICENESS, conftest._STARTING_NICENESS))
show()
assert conftest._set_own_priority(conftest._STARTING_NICENESS)
show()
release.set()
"""


def run_inner_suite(
    tmp_path: Path, source: str, env: dict[str, str], *options: str, workers: int = 2, timeout: float = 300
):
    """``source`` as ``test_inner.py``, run by pytest on ``workers`` xdist workers (0: in pytest's own
    process) with only the plugins under test: xdist and the root conftest (the installed plugins' imports
    and assertion rewriting would cost each of the processes about a CPU-second)."""
    import subprocess
    import sys

    (tmp_path / "test_inner.py").write_text(source)
    # A session of its own: run from an xdist worker of this suite, it would otherwise inherit the worker's
    # PYTEST_XDIST_* variables and its controller would take itself for a worker.
    env = {name: value for name, value in env.items() if not name.startswith("PYTEST_XDIST")}
    env |= {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
    spread = ["-n", str(workers), "--dist", "loadgroup"] if workers else ["-n", "0"]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist.plugin",
               "-p", "conftest", *spread, *options, "test_inner.py"]  # fmt: skip
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def test_xdist_groups_keep_their_tests_on_one_worker_and_waiting_tests_run_first_in_line(tmp_path):
    """The suite relies on `xdist_group` to build a shared fixture (a Ray cluster, a trained run) once; some
    pytest and pytest-xdist pairs silently ignore the mark, which spreads a group over the workers. The root
    conftest (loaded here as a plugin) runs the tests of the waiting groups (`multiprocess` here) at nice
    -10 where it may, and every other test at the priority its worker started with."""
    import os
    import subprocess
    import sys

    started_at = os.getpriority(os.PRIO_PROCESS, 0)
    env = {**os.environ, "WORKERS_LOG": str(tmp_path / "workers.log"), "PYTHONPATH": str(ROOT)}
    done = run_inner_suite(tmp_path, GROUPED, env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in (tmp_path / "workers.log").read_text().splitlines()]
    assert len(lines) == 8 and len({worker for worker, _ in lines if worker != "alone"}) == 1, lines
    assert {int(n) for worker, n in lines if worker == "alone"} == {started_at}, lines
    may_raise = subprocess.run([sys.executable, "-c", "import os; os.nice(-1)"], capture_output=True)
    if may_raise.returncode != 0:
        pytest.skip("raising a priority needs root or CAP_SYS_NICE here: only the groups were checked")
    assert {int(n) for worker, n in lines if worker != "alone"} == {min(-10, started_at)}, lines
    # A worker's priority goes back for the next test, on every thread (here one started before the raise).
    back_again = subprocess.run(
        [sys.executable, "-c", RAISED_AND_BACK], env=env, capture_output=True, text=True, timeout=60
    )
    assert back_again.stdout.split() == [str(min(-10, started_at))] * 2 + [str(started_at)] * 2, back_again


KEPT = (
    RECORDING
    + """
@pytest.fixture(scope="module")
def made():
    record("made", os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("i", range(6))
def test_kept(made, i):
    record("kept", os.environ["PYTEST_XDIST_WORKER"])
"""
)

SPREAD = (
    RECORDING
    + """
pytestmark = pytest.mark.spread

@pytest.mark.parametrize("i", range(6))
def test_spread(i):
    time.sleep(0.3)
    record("spread", os.environ["PYTEST_XDIST_WORKER"])
"""
)


def test_a_modules_tests_share_one_worker_unless_it_is_marked_spread(tmp_path):
    """The root conftest keeps a module's tests on one xdist worker, so its module fixtures are made once
    and JAX's in-memory programs serve all of them; a module marked `spread` is handed out test by test."""
    import os

    (tmp_path / "test_spread.py").write_text(SPREAD)
    env = {**os.environ, "WORKERS_LOG": str(tmp_path / "workers.log")}
    done = run_inner_suite(tmp_path, KEPT, env, "test_spread.py")
    assert done.returncode == 0 and "12 passed" in done.stdout, done.stdout + done.stderr
    lines = [line.split() for line in (tmp_path / "workers.log").read_text().splitlines()]
    kinds = ("made", "kept", "spread")
    workers = {kind: {worker for what, worker in lines if what == kind} for kind in kinds}
    assert [what for what, _ in lines].count("made") == 1 and workers["made"] == workers["kept"], lines
    assert len(workers["kept"]) == 1 and len(workers["spread"]) == 2, lines


ENDING = """
import atexit, os, pytest

pytestmark = pytest.mark.spread  # over both workers: each has a session to end

@pytest.fixture(scope="session")
def session_resource():
    yield
    with open(os.environ["ENDING_LOG"], "a") as log:
        log.write("torn down\\n")

@pytest.mark.parametrize("i", range(4))
def test_passes(session_resource, i):
    atexit.register(lambda: open(os.environ["ENDING_LOG"], "a").write("exit handler\\n"))

def test_fails(session_resource):
    assert 1 == 2
"""


def test_a_worker_ends_once_its_session_is_over_with_every_result_and_teardown_delivered(tmp_path):
    """The root conftest ends each xdist worker when its session is over, without the interpreter's teardown:
    the failure still reaches the summary and the exit status, every worker's session fixtures are torn
    down, and no exit handler runs (``MELTEMI_WORKER_FULL_EXIT=1`` restores the usual exit)."""
    import os

    env = {**os.environ, "ENDING_LOG": str(tmp_path / "ending.log")}
    env.pop("MELTEMI_WORKER_FULL_EXIT", None)
    done = run_inner_suite(tmp_path, ENDING, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED test_inner.py::test_fails" in done.stdout, done.stdout
    assert "1 failed, 4 passed" in done.stdout, done.stdout
    assert (tmp_path / "ending.log").read_text().splitlines() == ["torn down"] * 2


CRASHING = """
import os, time, pytest

pytestmark = pytest.mark.spread  # each test on its own, as written: not the module's tests on one worker

@pytest.mark.parametrize("i", range(6))
def test_passes(i):
    time.sleep(0.1)

def test_crashes():
    time.sleep(0.3)
    os.abort()

@pytest.mark.xdist_group("together")
@pytest.mark.parametrize("i", range(3))
def test_grouped(i):
    time.sleep(0.1)
"""


def test_a_run_that_loses_a_worker_reports_the_crash_and_ends(tmp_path):
    """A worker that dies (an abort in XLA's runtime, say) fails its test and the run ends: with the suite's
    options (``--max-worker-restart=0``, see pyproject.toml) xdist's loadgroup scheduler does not replace
    the worker, which in pytest-xdist 3.8 hangs the run for good."""
    import os

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    restarts = [option for option in addopts if option.startswith("--max-worker-restart")]
    assert restarts == ["--max-worker-restart=0"], addopts
    done = run_inner_suite(tmp_path, CRASHING, dict(os.environ), *restarts, timeout=120)
    report = done.stdout + done.stderr
    assert done.returncode == 1, report
    assert "crashed while running 'test_inner.py::test_crashes'" in report, report
    assert "FAILED test_inner.py::test_crashes" in done.stdout and "1 failed" in done.stdout, report


OPTIONAL = """
import pytest

def test_skipped_by_pytest_for_a_missing_module():
    pytest.importorskip("meltemi_no_such_module")

def test_skipped_in_its_own_words():
    pytest.importorskip("meltemi_no_such_module", reason="meltemi_no_such_module is not installed: [x] extra")

@pytest.mark.xdist_group("grouped")
def test_skipped_in_a_group():
    pytest.importorskip("meltemi_no_such_module")

def test_skipped_for_another_reason():
    pytest.skip("needs a GPU; none is attached")

def test_that_runs():
    pass
"""


def test_the_controller_lists_the_tests_skipped_for_a_missing_module_and_no_other(tmp_path):
    """CI runs the README's command first and then, with the optional groups installed, only the tests that
    skipped for a missing module (`MELTEMI_OPTIONAL_SKIPS`, written by the controller alone, by test id
    without xdist's group). A skip for any other reason is not listed; a test's own skip reason is listed
    when it says the module is not installed."""
    import os

    listed = tmp_path / "optional-skips"
    done = run_inner_suite(tmp_path, OPTIONAL, {**os.environ, "MELTEMI_OPTIONAL_SKIPS": str(listed)})
    assert done.returncode == 0 and "1 passed, 4 skipped" in done.stdout, done.stdout + done.stderr
    assert sorted(listed.read_text().splitlines()) == [
        "test_inner.py::test_skipped_by_pytest_for_a_missing_module",
        "test_inner.py::test_skipped_in_a_group",
        "test_inner.py::test_skipped_in_its_own_words",
    ]


ACCELERATORS = """
import os, pytest

def test_records_what_its_worker_was_told():
    with open(os.environ["SEEN_LOG"], "a") as log:
        told = os.environ.get("MELTEMI_TEST_ACCELERATORS", "unset")
        log.write(f"{told!r} {os.environ['XLA_PYTHON_CLIENT_PREALLOCATE']}\\n")

@pytest.mark.gpu
@pytest.mark.parametrize("i", range(3))
def test_on_a_gpu(i):
    pass
"""


def test_accelerators_are_found_once_by_the_controller_and_workers_take_its_word(tmp_path):
    """The root conftest finds the accelerators once, in the controller before its workers start, and hands
    them to the workers in ``MELTEMI_TEST_ACCELERATORS``: here none, so the GPU tests are skipped; told
    ``gpu``, the workers run them without asking JAX. Test processes do not preallocate GPU memory."""
    import os

    env = {**os.environ, "SEEN_LOG": str(tmp_path / "seen.log"), "MELTEMI_COUNT_WORK": str(tmp_path / "work")}
    for name in ("MELTEMI_TEST_ACCELERATORS", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        env.pop(name, None)
    found = run_inner_suite(tmp_path, ACCELERATORS, env)
    assert found.returncode == 0 and "1 passed, 3 skipped" in found.stdout, found.stdout + found.stderr
    assert (tmp_path / "seen.log").read_text() == "'' false\n"  # set by the controller, before the worker
    assert (tmp_path / "work").read_text().splitlines().count("accelerators detected") == 1

    (tmp_path / "seen.log").unlink()
    told = run_inner_suite(tmp_path, ACCELERATORS, {**env, "MELTEMI_TEST_ACCELERATORS": "gpu"})
    assert told.returncode == 0 and "4 passed" in told.stdout, told.stdout + told.stderr
    assert (tmp_path / "seen.log").read_text() == "'gpu' false\n"
    assert (tmp_path / "work").read_text().splitlines().count("accelerators detected") == 1


def test_the_probe_asks_jax_in_a_child_process_and_finds_no_accelerator_on_this_cpu(tmp_path):
    """What the controller runs where JAX has an accelerator backend installed (on a CPU-only machine it
    is skipped): a child process that lists JAX's devices and exits. Here it must find none, quietly."""
    import os
    import subprocess
    import sys

    probe = "import conftest; print(sorted(conftest._probe_accelerators()))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    if "gpu" in done.stdout or "tpu" in done.stdout:
        pytest.skip("this machine has an accelerator: the GPU tests themselves check the probe")
    assert done.returncode == 0 and done.stdout == "[]\n" and "conftest:" not in done.stderr, done


# ---- no import cycles, in any package ----------------------------------------------------------------------


def _module_names(src: Path) -> dict[str, Path]:
    """Each module under a package's `src/`, by dotted name (a package by its `__init__.py`)."""
    found = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _for_type_checkers(tree: ast.AST) -> set[int]:
    """The nodes under `if TYPE_CHECKING:`, which never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def _lazy_homes(path: Path) -> dict[str, str]:
    """A package `__init__.py`'s names imported on first use: its `_HOMES` table (module -> names), as
    `meltemi.trainer`'s and `meltemi.datastore`'s are written, by name; empty for any other module."""
    if path.name != "__init__.py":
        return {}
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_HOMES" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: module for module, names in table.items() for name in names}
    return {}


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's own modules `name` imports, at module level or inside a function alike (a lazy import
    is still an import); `from package import name` counts as importing the submodule when there is one, or
    the module a lazy package imports that name from (`_lazy_homes`). Importing `a.b.c` runs `a.b`'s
    `__init__` first, so it counts as importing `a.b` too, unless `name` is inside `a.b` itself (whose
    `__init__` ran before it)."""
    found = _direct_imports(name, path, modules)
    own = name.split(".")
    parents = {
        ".".join(target.split(".")[:depth])
        for target in found
        for depth in range(1, target.count(".") + 1)
        if target.split(".")[:depth] != own[:depth]
    }
    return (found | (parents & modules.keys())) - {name}


def _direct_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped, found = _for_type_checkers(tree), set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: None if path.name == "__init__.py" else -1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                whole = f"{target}.{alias.name}"
                lazy = _lazy_homes(modules[target]).get(alias.name) if target in modules else None
                found.update(
                    [whole] if whole in modules else [lazy] if lazy else [target] if target in modules else []
                )
    return found - {name}


def import_cycles(src: Path) -> list[list[str]]:
    """The sets of modules under `src` that import each other, directly or through others (Tarjan's
    strongly connected components of more than one module)."""
    modules = _module_names(src)
    graph = {name: sorted(_imports_of(name, path, modules)) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return cycles


@pytest.mark.parametrize("package_dir", sorted(PACKAGES))
def test_no_package_has_an_import_cycle(package_dir):
    assert import_cycles(ROOT / "packages" / package_dir / "src") == []


def test_the_cycle_checker_sees_a_lazy_cycle_and_ignores_imports_for_type_checkers(tmp_path):
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from pkg import a\n")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("def thing():\n    from . import a\n")
    for_type_checkers = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import d\n"
    (package / "c.py").write_text(for_type_checkers)
    (package / "d.py").write_text("import pkg.c\n")
    assert import_cycles(tmp_path / "src") == [["pkg.a", "pkg.b"]]


def test_the_cycle_checker_sees_a_cycle_through_a_package_init_and_through_a_lazy_packages_names(tmp_path):
    """Importing `pkg.sub.inputs` runs `pkg/sub/__init__.py`, whose builder imports the reader back (how the
    token store's reader of tokenizer files and its builder once met); and a name a lazy package imports
    on first use (its `_HOMES`) is an import of the module that defines it. A module inside a package does
    not import that package's `__init__` again."""
    package = tmp_path / "src" / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "lazy").mkdir()
    (package / "__init__.py").write_text("from pkg import reader\n")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.builder import build\n")
    (package / "sub" / "builder.py").write_text("from pkg.reader import read\nfrom pkg.sub.inputs import x\n")
    (package / "sub" / "inputs.py").write_text("x = 1\n")
    (package / "reader.py").write_text("from pkg.sub.inputs import x\n")
    (package / "lazy" / "__init__.py").write_text('_HOMES = {"pkg.lazy.impl": ("f",)}\n')
    (package / "lazy" / "impl.py").write_text("from pkg.user import g\n")
    (package / "user.py").write_text("from pkg.lazy import f\n")
    assert sorted(import_cycles(tmp_path / "src")) == [
        ["pkg.lazy.impl", "pkg.user"],
        ["pkg.reader", "pkg.sub", "pkg.sub.builder"],
    ]


def test_pytest_rewrites_the_asserts_of_the_projects_modules_and_no_installed_librarys():
    """The suite loads only the plugins it uses (pyproject.toml's addopts): autoloaded, every installed
    distribution that offers one (zarr, Hypothesis, anyio, ...) would have all its modules' asserts rewritten
    in each pytest process, over 200 modules, about 2 CPU-seconds a process where bytecode is not written."""
    import sys

    def by_pytest(module) -> bool:  # loaded by pytest's import hook, which rewrites asserts
        loader = getattr(getattr(module, "__spec__", None), "loader", None)
        return type(loader).__name__ == "AssertionRewritingHook"

    def installed(name: str) -> bool:
        return site in Path(getattr(sys.modules[name], "__file__", None) or "/").resolve().parents

    site = Path(pytest.__file__).resolve().parents[1]
    rewritten = sorted(name for name, module in list(sys.modules.items()) if by_pytest(module))
    assert any(name.endswith("test_workspace") for name in rewritten), rewritten  # the tests' own: rewritten
    libraries = [name for name in rewritten if installed(name)]
    explicit = {"xdist.plugin", "_hypothesis_pytestplugin"}  # named by -p: pytest rewrites what it is given
    assert set(libraries) <= explicit, libraries


def test_pytest_keeps_the_test_modules_it_rewrote_where_the_environment_writes_no_bytecode(tmp_path):
    """With PYTHONDONTWRITEBYTECODE set (as on this project's machines) pytest would rewrite every test
    module's asserts again in each of its processes; the root conftest lets pytest's processes keep them
    (beside the module, or under the suite's bytecode prefix where it sets one)."""
    import os

    env = {name: value for name, value in os.environ.items() if name != "PYTHONPYCACHEPREFIX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    done = run_inner_suite(tmp_path, "def test_one():\n    assert 1 + 1 == 2\n", env, workers=0)
    assert done.returncode == 0, done.stdout + done.stderr
    beside = list((tmp_path / "__pycache__").glob("test_inner.*-pytest-*.pyc"))
    prefixed = list(
        (ROOT / ".cache" / "meltemi" / "pycache").glob(f"{str(tmp_path)[1:]}/test_inner.*-pytest-*.pyc")
    )
    assert len(beside + prefixed) == 1, (beside, prefixed)
