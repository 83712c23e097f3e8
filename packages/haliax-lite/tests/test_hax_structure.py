"""The package's shape as a reviewer reads it: an explicit ``__all__``, imports that point down."""

import ast
import pathlib
import types

import haliax_lite as hax

SOURCE = pathlib.Path(hax.__file__).parent
PUBLIC_SUBMODULES = {
    "debug",
    "indexing",
    "nn",
    "partitioning",
    "quantization",
    "random",
    "state_dict",
    "tree_util",
    "util",
}


def test_all_lists_names_not_implementation_modules():
    modules = {n for n in hax.__all__ if isinstance(getattr(hax, n), types.ModuleType)}
    assert modules == PUBLIC_SUBMODULES
    assert len(hax.__all__) == len(set(hax.__all__))
    assert all(hasattr(hax, n) for n in hax.__all__)
    for hidden in ("axis", "core", "unary", "binary", "reductions", "named_array_methods", "install_methods"):
        assert hidden not in hax.__all__


def test_every_public_function_is_listed():
    public = {
        n for n in dir(hax) if not n.startswith("_") and not isinstance(getattr(hax, n), types.ModuleType)
    }
    assert public == set(hax.__all__) - PUBLIC_SUBMODULES, "a module or name is exported but not listed"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__") or "<package>"


def _runtime_imports(path: pathlib.Path) -> set[str]:
    """Submodules this file imports when it runs (anywhere, functions included; not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    package = _module_name(path).rpartition(".")[0] if path.name != "__init__.py" else _module_name(path)
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped.update(id(n) for n in ast.walk(node))
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = (
                package.split(".")[: len(package.split(".")) - node.level + 1]
                if package != "<package>"
                else []
            )
            base = [b for b in base if b]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            if node.module:  # `from .x import y` imports x; `from . import x` imports only the submodule x
                found.add(target)
            found.update(".".join([*target.split("."), a.name]).strip(".") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("haliax_lite."):
            found.add(node.module.removeprefix("haliax_lite."))
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SOURCE.rglob("*.py")}
    return {name: {m for m in _runtime_imports(p) if m in files and m != name} for name, p in files.items()}


def test_submodules_import_only_downwards():
    graph = _graph()  # the package's __init__ included: the layers use `_namespace`, never the package
    state: dict[str, str] = {}

    def visit(node, path):
        state[node] = "active"
        for nxt in graph.get(node, ()):
            assert state.get(nxt) != "active", f"import cycle: {' -> '.join([*path, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])


def test_the_state_dict_and_tree_utilities_do_not_reach_up_into_the_layers():
    graph = _graph()
    for low in ("serialization", "state_dict", "tree_util", "core"):
        assert not {m for m in graph[low] if m.startswith("nn")}, low
    assert "serialization" in graph["nn.scan"]


def test_no_module_looks_the_package_up_at_run_time():
    for path in SOURCE.rglob("*.py"):
        text = path.read_text()
        assert "import_module" not in text, path
        assert "_hax()" not in text, path
