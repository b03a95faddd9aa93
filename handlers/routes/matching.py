"""How Flynn's router picks a route and a backend (spec §9), as pure data structures.

The proxy builds a :class:`RouteTable` from the live routes and asks it per request; the backend
choice takes its randomness and in-flight counts as arguments so tests can pin them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Mapping, Sequence, TypeVar

from .model import HTTP, Route

T = TypeVar("T")
MAX_WILDCARD_PARTS = 5


def normalize_host(host: str) -> str:
    """Lower-case and strip ``:port`` (IPv6 literals keep their brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end != -1 else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def domain_candidates(host: str) -> list[str]:
    """Lookup order: exact, wildcards from most to least specific (Go ``SplitN(host, ".", 5)``), ``*``."""
    parts = host.split(".", MAX_WILDCARD_PARTS - 1)
    wildcards = ["*." + ".".join(parts[len(parts) - i:]) for i in range(len(parts), 0, -1)]
    return [host, *wildcards, "*"]


def path_segments(path: str) -> list[str]:
    """Segments of a path; empty segments are ignored, so ``//a`` is ``/a``."""
    return [seg for seg in path.split("/") if seg]


@dataclass
class _Node(Generic[T]):
    children: dict[str, "_Node[T]"] = field(default_factory=dict)
    value: T | None = None


class PathTree(Generic[T]):
    """Flynn's ``router/tree.go``: segment-wise longest-prefix lookup."""

    def __init__(self) -> None:
        self._root: _Node[T] = _Node()

    def insert(self, path: str, value: T) -> None:
        node = self._root
        for seg in path_segments(path):
            node = node.children.setdefault(seg, _Node())
        node.value = value

    def lookup(self, path: str) -> T | None:
        """The deepest node on the request path that holds a value."""
        node, best = self._root, self._root.value
        for seg in path_segments(path):
            child = node.children.get(seg)
            if child is None:
                break
            node = child
            if node.value is not None:
                best = node.value
        return best


class RouteTable:
    """HTTP routes indexed by lower-cased domain, each domain a :class:`PathTree`."""

    def __init__(self, routes: Iterable[Route]) -> None:
        http = [r for r in routes if r.type == HTTP]
        self._trees: dict[str, PathTree[Route]] = {}
        for route in http:
            if route.path == "/":
                self._trees.setdefault(route.domain.lower(), PathTree()).insert("/", route)
        for route in http:
            tree = self._trees.get(route.domain.lower())
            if route.path != "/" and tree is not None:
                tree.insert(route.path, route)

    def lookup(self, host: str, path: str) -> Route | None:
        """The route for a request, or ``None`` (the router's 404)."""
        key = normalize_host(host)
        for candidate in domain_candidates(key):
            tree = self._trees.get(candidate)
            if tree is not None:
                return tree.lookup(path)
        return None


@dataclass(frozen=True)
class Backend:
    """One registered instance of a service."""

    addr: str
    leader: bool = False


def candidates(backends: Sequence[Backend], leader_only: bool) -> list[Backend]:
    """All instances, or only the leader (flagged, else the first entry) for ``leader`` routes."""
    if not leader_only or not backends:
        return list(backends)
    flagged = [b for b in backends if b.leader]
    return flagged[:1] if flagged else [backends[0]]


def choose_backends(
    backends: Sequence[Backend],
    sticky: str | None,
    inflight: Mapping[str, int],
    rng: Callable[[int, int], int] | None = None,
) -> list[Backend]:
    """Order to try backends in: sticky first if present, else power-of-two-choices, rest shuffled.

    Flynn retries only dial errors, on other backends, up to 4 attempts in total; the caller takes
    ``[:4]`` of this list.
    """
    if not backends:
        return []
    pick = rng or random.randint
    pool = list(backends)
    first: Backend | None = None
    if sticky is not None:
        first = next((b for b in pool if b.addr == sticky), None)
    if first is None:
        a = pool[pick(0, len(pool) - 1)]
        b = pool[pick(0, len(pool) - 1)]
        first = a if inflight.get(a.addr, 0) <= inflight.get(b.addr, 0) else b
    rest = [b for b in pool if b is not first]
    random.shuffle(rest)
    return [first, *rest]
