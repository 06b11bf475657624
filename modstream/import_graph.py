"""The project's own import graph, read from the source with ``ast`` (nothing is imported).

Used to derive the trained models' cache keys from the files their training really
imports, and by the layering test. Every import counts, including ones inside
functions: a lazy import still runs that code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "workers", "training", "modstream")

Graph = dict[str, set[str]]


def module_files(packages: Iterable[str] = PACKAGES, root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for every module of ``packages`` (a package is its ``__init__``)."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _imported(tree: ast.AST, known: Iterable[str]) -> set[str]:
    """The known modules an import in ``tree`` names; ``from pkg import mod`` counts as ``pkg.mod``."""
    known = set(known)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found & known


def import_graph(packages: Iterable[str] = PACKAGES, root: Path = ROOT) -> Graph:
    """Module -> the modules of ``packages`` it imports."""
    files = module_files(packages, root)
    return {name: _imported(ast.parse(path.read_bytes(), str(path)), files) for name, path in files.items()}


def reachable(graph: Graph, start: Iterable[str]) -> set[str]:
    """``start`` and every module it imports, directly or not."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(graph[name])
    return seen


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's algorithm; the graph is a few dozen modules deep at most
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for dep in graph[name]:
            if dep not in index:
                visit(dep)
                low[name] = min(low[name], low[dep])
            elif dep in on_stack:
                low[name] = min(low[name], index[dep])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1 or name in graph[name]:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found
