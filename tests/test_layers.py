"""Layers point one way: `search/` uses `routing/`, which uses `sources/`; never back.

Two checks. One imports every module of a package in a fresh interpreter in which the
layers above it cannot be imported at all (what runs at import time). The other reads
every module's source and finds every `import` in it, wherever it is (inside a function,
under `TYPE_CHECKING`): an import a function makes only when called counts as much as one
at the top. The same reading finds import cycles between modules, which a deferred import
(inside a function) hides from the first check.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("sources", "routing", "search")  # each may import only those before it

# Known cycles, each closed by one deferred import, being removed by the lead (the
# correction loop's regroup): (importer, imported). Empty this as they go; an entry whose
# import is gone fails `test_the_known_cycles_are_still_there`, so it cannot linger.
KNOWN_CYCLES: frozenset[tuple[str, str]] = frozenset()

PROBE = """
import importlib, pkgutil, sys

blocked = set(sys.argv[2].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is a layer above {sys.argv[1]}")
        return None

sys.meta_path.insert(0, Block())
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
print("imported", sys.argv[1])
"""


@pytest.mark.parametrize(
    ("package", "above"),
    [("sources", "routing,search"), ("routing", "search")],
)
def test_a_layer_imports_nothing_above_it(package: str, above: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, package, above],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"imported {package}" in done.stdout


def test_the_probe_does_catch_an_upward_import() -> None:
    """The same probe, with the layer below blocked, must fail: it is not vacuous."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "routing", "sources"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "is a layer above routing" in done.stderr


def _modules() -> dict[str, Path]:
    found = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(project module, line) of every import in the file, at any depth."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name, node.lineno


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of one such import}."""
    known = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in known.items():
        edges: dict[str, int] = {}
        for target, line in _imported(module, path, known):
            edges.setdefault(target, line)
        graph[module] = edges
    return graph


def test_no_import_anywhere_points_up_a_layer() -> None:
    rank = {layer: index for index, layer in enumerate(LAYERS)}
    upward = [
        f"{module}:{line} imports {target}"
        for module, edges in import_graph().items()
        for target, line in edges.items()
        if rank[target.split(".")[0]] > rank[module.split(".")[0]]
    ]
    assert upward == []


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_but_the_known_ones() -> None:
    graph = import_graph()
    for importer, imported in KNOWN_CYCLES:
        graph[importer].pop(imported, None)
    assert cycles(graph) == []


def test_the_known_cycles_are_still_there() -> None:
    """An entry of KNOWN_CYCLES whose import was removed must leave the list."""
    graph = import_graph()
    gone = [pair for pair in sorted(KNOWN_CYCLES) if pair[1] not in graph[pair[0]]]
    assert gone == []


def test_the_reading_finds_a_deferred_import_and_a_cycle(tmp_path: Path) -> None:
    """Not vacuous: an import inside a function, relative or not, is found, and two
    modules importing each other that way are a cycle."""
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    first.write_text("def f():\n    from search import second\n")
    second.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import first\n"
    )
    known = {"search.first": first, "search.second": second}
    found = {name: dict(_imported(name, path, known)) for name, path in known.items()}
    assert found == {"search.first": {"search.second": 2}, "search.second": {"search.first": 3}}
    assert cycles(found) == [["search.first", "search.second"]]
