"""The modules of ``sarek/``, ``sim/`` and ``backends/`` import each other without cycles.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``
anywhere in a module counts, a deferred one inside a function too (it still makes the importer
depend on what it imports), except those under ``if TYPE_CHECKING:``. ``from pkg import name``
is an edge to the submodule ``pkg.name`` when there is one, else to ``pkg`` itself. Importing a
submodule is not counted as importing its package's ``__init__``.

There is none, and only the entry modules of ``sarek`` (``ENTRY_MODULES``) import ``sim`` or
``backends``. Run ``python tests/test_imports.py`` to print any cycle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sarek", "sim", "backends")


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name (a package by its own)."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree``, at any depth, leaving out ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom,
              known: dict[str, Path]) -> set[str]:
    """The project modules one import statement of module ``name`` (at ``path``) names."""
    out: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = alias.name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                out.add(target)
        return out
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            out.add(f"{base}.{alias.name}")
        elif base in known:
            out.add(base)
    return out


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, set[str]]:
    """For each module, the project modules it imports."""
    known = modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets: set[str] = set()
        for node in _import_nodes(tree):
            targets |= _imported(name, path, node, known)
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without
    recursion), each sorted; every import cycle lies inside one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def cycle_through(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import cycle through the component's first module, for a message."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    return [*paths[node], start]
                if succ not in paths:
                    paths[succ] = [*paths[node], succ]
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")


ENTRY_MODULES = frozenset({"sarek", "sarek.targets", "sarek.cli", "sarek.cli_args",
                           "sarek.demo", "sarek.demo_rows", "sarek.demo_tools",
                           "sarek.analyze", "sarek.dispatch"})
"""The modules of ``sarek`` that compose the compiler with the simulator and the targets: the
package's re-exports, ``simulate``/``emit``, the command line (its argument types bound launch
dimensions as the simulator does; ``analyze`` asks a target's device gate), the demo (its
rows and its tools), and the launch path (``kernel[grid, block]``)."""


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert not cycles(graph), "import cycles: " + "; ".join(
        " -> ".join(cycle_through(graph, component)) for component in cycles(graph))


def test_only_the_entry_modules_of_sarek_import_sim_or_backends() -> None:
    reaching = {module: sorted(t for t in targets if t.split(".")[0] in ("sim", "backends"))
                for module, targets in import_graph().items()
                if module.split(".")[0] == "sarek" and module not in ENTRY_MODULES}
    assert not {m: t for m, t in reaching.items() if t}


def test_the_checker_finds_a_deferred_cycle_and_ignores_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (package / "c.py").write_text("from . import a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from pkg import e\n")
    (package / "e.py").write_text("import pkg.d\n")
    graph = import_graph(tmp_path, ["pkg"])
    components = cycles(graph)
    assert components == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycle_through(graph, components[0]) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


if __name__ == "__main__":
    found = import_graph()
    for component in cycles(found):
        print(" -> ".join(cycle_through(found, component)), f"  (all of {component})")


@pytest.mark.parametrize("first", ["sim", "sim.execute", "backends.registry", "backends.cuda",
                                   "sarek"])
def test_the_entry_points_work_whichever_package_is_imported_first(first: str) -> None:
    # Importing a module of sim or backends first runs sarek/__init__ half-way through theirs:
    # the entry points must not bind names of a module that is still being made.
    script = (f"import {first}\nimport sarek\nfrom sarek.loader import load_module\n"
              "launch = load_module('examples/gemm_f32.py').make(4, 4, 4)\n"
              "launch.simulate()\n"
              "sarek.simulate(launch.kernel, dict(launch.args), launch.grid, launch.block, "
              "target='cuda')\n"
              "print(len(sarek.emit(launch.kernel, 'opencl')) > 0)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr[-2000:]
