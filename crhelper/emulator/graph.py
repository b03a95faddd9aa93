"""Dependency graph of resources: cycle detection, creation levels and delete order (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class DependencyGraph:
    """Nodes with the set of nodes each one depends on (edges to unknown nodes are dropped)."""

    def __init__(self, dependencies: Mapping[str, Iterable[str]]) -> None:
        nodes = list(dependencies)
        known = set(nodes)
        self._deps: dict[str, frozenset[str]] = {
            node: frozenset(d for d in dependencies[node] if d in known and d != node) for node in nodes
        }
        dependents: dict[str, set[str]] = {node: set() for node in nodes}
        for node, deps in self._deps.items():
            for dep in deps:
                dependents[dep].add(node)
        self._dependents = {node: frozenset(d) for node, d in dependents.items()}

    @property
    def nodes(self) -> list[str]:
        return list(self._deps)

    def dependencies(self, node: str) -> frozenset[str]:
        return self._deps[node]

    def dependents(self, node: str) -> frozenset[str]:
        return self._dependents[node]

    def reversed(self) -> "DependencyGraph":
        """The delete-order graph: a node waits for everything that depends on it."""
        return DependencyGraph({node: self._dependents[node] for node in self._deps})

    def subgraph(self, nodes: Iterable[str]) -> "DependencyGraph":
        """Only `nodes`, keeping order constraints that pass through removed nodes."""
        keep = set(nodes)
        result: dict[str, set[str]] = {}
        for node in self._deps:
            if node not in keep:
                continue
            reached: set[str] = set()
            stack = list(self._deps[node])
            seen: set[str] = set()
            while stack:
                dep = stack.pop()
                if dep in seen:
                    continue
                seen.add(dep)
                if dep in keep:
                    reached.add(dep)
                else:
                    stack.extend(self._deps[dep])
            result[node] = reached
        return DependencyGraph(result)

    def find_cycle(self) -> list[str] | None:
        """One cycle as [A, B, A], or None; deterministic in declaration order."""
        state: dict[str, int] = {}
        path: list[str] = []

        def visit(node: str) -> list[str] | None:
            state[node] = 1
            path.append(node)
            for dep in sorted(self._deps[node], key=self.nodes.index):
                if state.get(dep) == 1:
                    return path[path.index(dep):] + [dep]
                if dep not in state:
                    found = visit(dep)
                    if found:
                        return found
            state[node] = 2
            path.pop()
            return None

        for node in self._deps:
            if node not in state:
                found = visit(node)
                if found:
                    return found
        return None

    def levels(self) -> list[list[str]]:
        """Groups that can run concurrently, in creation order; raises ValueError on a cycle."""
        cycle = self.find_cycle()
        if cycle:
            raise ValueError("cycle: " + " -> ".join(cycle))
        done: set[str] = set()
        result: list[list[str]] = []
        remaining = list(self._deps)
        while remaining:
            level = [n for n in remaining if self._deps[n] <= done]
            result.append(level)
            done.update(level)
            remaining = [n for n in remaining if n not in done]
        return result

    def order(self) -> list[str]:
        """A creation order (dependencies first)."""
        return [node for level in self.levels() for node in level]

    def ready(self, succeeded: set[str], started: set[str]) -> list[str]:
        """Nodes not started yet whose dependencies have all succeeded."""
        return [n for n in self._deps if n not in started and self._deps[n] <= succeeded]
