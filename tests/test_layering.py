"""The import graph of `crhelper` and `handlers`: no cycle, no upward import (issue 10).

Read from the source with `ast` (every import, those inside functions included, since a deferred
import is still a dependency), so the test needs nothing installed and fails on the edge it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("crhelper", "handlers"):
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import statement loads (nearest existing module of each name)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
        names = submodules + ([base] if node.module or len(submodules) < len(node.names) else [])
    resolved = []
    for name in names:
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name and name != module:
            resolved.append(name)
    return resolved


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(_targets(name, node))
    return graph


GRAPH = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
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
                    found.append(sorted(component))
    return found


def _is_command_module(name: str) -> bool:
    """Modules that build or run CLI commands may use the CLI's helpers."""
    last = name.rpartition(".")[2]
    return name.startswith("crhelper.cli") or last == "cli" or last.endswith("_cli")


def test_the_import_graph_has_no_cycle() -> None:
    assert _cycles(GRAPH) == []


def test_only_command_modules_import_the_cli() -> None:
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
              if t.startswith("crhelper.cli") and not _is_command_module(m)]
    assert upward == []


def test_the_framework_never_imports_a_provider() -> None:
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() if m.startswith("crhelper")
              for t in targets if t.startswith("handlers")]
    assert upward == []


@pytest.mark.parametrize("lower, higher", [
    ("crhelper.local", "crhelper.emulator"),
    ("crhelper.local", "crhelper.contract"),
    ("crhelper.store", "crhelper.emulator"),
    ("crhelper.store", "crhelper.local"),
    ("crhelper.transports", "crhelper.emulator"),
    ("crhelper.cloud", "crhelper.emulator"),
    ("crhelper.cloud", "crhelper.local"),
])
def test_lower_layers_do_not_import_higher_ones(lower: str, higher: str) -> None:
    upward = [f"{m} -> {t}" for m, targets in GRAPH.items() if m.startswith(lower)
              for t in targets if t.startswith(higher) and not _is_command_module(m)]
    assert upward == []


def test_providers_do_not_import_each_other() -> None:
    def provider_of(name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if parts[0] == "handlers" and len(parts) > 1 else None

    crossing = [f"{m} -> {t}" for m, targets in GRAPH.items() for t in targets
                if provider_of(m) and provider_of(t) and provider_of(m) != provider_of(t)]
    assert crossing == []


def test_only_a_providers_facade_imports_the_framework_public_face() -> None:
    """`import crhelper` (Provider, Result, get_logger...) belongs in provider.py (and the CLI);
    domain modules use the framework's infrastructure homes (paths, config, servers) at most."""
    facade = ("provider", "cli", "manifest")
    offenders = [m for m, targets in GRAPH.items() if m.startswith("handlers.") and "crhelper" in targets
                 and m.rpartition(".")[2] not in facade]
    assert offenders == []
