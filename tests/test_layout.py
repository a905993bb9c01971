"""The package's layers can be read from its folders, and the imports keep to them.

Every module of ``robo_safe_rl`` is parsed (imports inside functions and ``TYPE_CHECKING`` blocks included) and its
imports of the package are mapped to folders and layers (DESIGN.md)::

    apps      apps/, diagnose/
    rundir    rundir/, checkpoint/
    core      config/, safety/, bridge/, training/, and the package's top-level modules (errors, __init__)

No import runs upward, no two folders import each other (directly or round a longer cycle), ``robo_safe_rl`` never
imports the tasks, and pyproject.toml's explicit ``packages`` list names every package folder.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "robo_safe_rl"
LAYERS = {"core": 0, "rundir": 1, "apps": 2}
FOLDERS = {
    "config": "core",
    "safety": "core",
    "bridge": "core",
    "training": "core",
    "rundir": "rundir",
    "checkpoint": "rundir",
    "apps": "apps",
    "diagnose": "apps",
}
TASKS = "robosafe_tasks"
#: ``{importing module: {imported module}}``, the package's imports of itself and of the tasks only.
Graph = dict[str, set[str]]


def folder_of(module: str) -> str:
    """``robo_safe_rl.training.runner`` -> ``training``; a top-level module is its own folder (``errors``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> str:
    """A module's layer: its folder's, or core for the package's top-level modules."""
    return FOLDERS.get(folder_of(module), "core")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, name: str, is_package: bool) -> set[str]:
    """Every module that the source of module ``name`` imports, made absolute, wherever the statement stands."""
    package = name if is_package else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # `from robo_safe_rl import rundir` imports a subpackage, not only the package.
            found.update(f"{base}.{a.name}" for a in node.names if (ROOT / base.replace(".", "/") / a.name).is_dir())
    return {m for m in found if m.split(".")[0] in ("robo_safe_rl", TASKS)}


def package_graph() -> Graph:
    return {
        module_name(path): imports_in(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def upward_imports(graph: Graph) -> list[str]:
    return [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in graph.items()
        for target in sorted(targets)
        if not target.startswith(TASKS) and LAYERS[layer_of(target)] > LAYERS[layer_of(module)]
    ]


def folder_cycles(graph: Graph) -> list[list[str]]:
    """Cycles of the graph of folders (an edge for every import from one folder into another)."""
    edges: dict[str, set[str]] = {}
    for module, targets in graph.items():
        for target in targets:
            if not target.startswith(TASKS) and folder_of(target) != folder_of(module):
                edges.setdefault(folder_of(module), set()).add(folder_of(target))
    done: set[str] = set()

    def walk(path: list[str]) -> list[str] | None:
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt in path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and (cycle := walk([*path, nxt])):
                return cycle
        done.add(path[-1])
        return None

    cycles: list[list[str]] = []
    for start in sorted(edges):
        cycle = walk([start]) if start not in done else None
        if cycle:  # each cycle once, starting at its smallest folder
            ring = cycle[:-1]
            first = ring.index(min(ring))
            ring = ring[first:] + ring[:first]
            if [*ring, ring[0]] not in cycles:
                cycles.append([*ring, ring[0]])
    return cycles


def test_every_package_folder_is_placed_in_a_layer() -> None:
    assert sorted(FOLDERS) == sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))


def test_no_import_runs_upward() -> None:
    assert upward_imports(package_graph()) == []


def test_no_two_folders_import_each_other() -> None:
    assert folder_cycles(package_graph()) == []


def test_the_library_never_imports_the_tasks() -> None:
    graph = package_graph()
    assert [f"{m} imports {t}" for m, targets in graph.items() for t in targets if t.startswith(TASKS)] == []


def test_pyproject_lists_every_package_folder() -> None:
    tomllib = pytest.importorskip("tomllib") if sys.version_info < (3, 11) else __import__("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    # Plus the folders mapped in from outside the package: envs/ as the tasks, configs/ as robo_safe_rl.configs.
    mapped = set(setuptools["package-dir"])
    assert TASKS in mapped
    # A subpackage of the tasks (envs/a1/) installs under the tasks' name through its parent's mapping.
    tasks = {f"{TASKS}.{p.parent.name}" for p in (ROOT / "envs").glob("*/__init__.py")}
    assert set(setuptools["packages"]) == {module_name(p) for p in PACKAGE.rglob("__init__.py")} | mapped | tasks


def test_the_checks_catch_what_they_look_for() -> None:
    # Imports hidden in a function, relative ones and a subpackage named in `from ... import` are all found.
    source = (
        "import os\n"
        "def f():\n"
        "    from robo_safe_rl.apps import play\n"
        "    from ..rundir import layout\n"
        "    from robo_safe_rl import diagnose\n"
        "    import robosafe_tasks\n"
    )
    found = imports_in(source, "robo_safe_rl.training.probe", is_package=False)
    assert found == {"robo_safe_rl.apps", "robo_safe_rl.rundir", "robo_safe_rl", "robo_safe_rl.diagnose", TASKS}
    assert upward_imports({"robo_safe_rl.training.probe": found}) == [
        "robo_safe_rl.training.probe (core) imports robo_safe_rl.apps (apps)",
        "robo_safe_rl.training.probe (core) imports robo_safe_rl.diagnose (apps)",
        "robo_safe_rl.training.probe (core) imports robo_safe_rl.rundir (rundir)",
    ]
    loop = {
        "robo_safe_rl.apps.play": {"robo_safe_rl.diagnose.vet"},
        "robo_safe_rl.diagnose.vet": {"robo_safe_rl.checkpoint.policy"},
        "robo_safe_rl.checkpoint.policy": {"robo_safe_rl.apps.play"},
    }
    assert folder_cycles(loop) == [["apps", "diagnose", "checkpoint", "apps"]]
