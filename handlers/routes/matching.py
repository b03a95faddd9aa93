"""How Flynn's router picks a route and a backend (spec §9), as pure data structures.

The proxy builds a :class:`RouteTable` from the live routes and asks it per request; the backend
choice takes its randomness and in-flight counts as arguments so tests can pin them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar

from .model import HTTP, Route

T = TypeVar("T")
MAX_WILDCARD_PARTS = 5
#: What every engine answers without a route (404) and without a live backend (503), as Flynn's router.
NOT_FOUND_BODY = "Not Found\n"
UNAVAILABLE_BODY = "Service Unavailable\n"


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
    """HTTP routes indexed by (lower-cased domain, port), each a :class:`PathTree`.

    Flynn keys routes by ``domain:port``: controller routes have port 0, which the default HTTP and
    HTTPS listeners look up; an additional listener looks up its own port (``router/http.go``)."""

    def __init__(self, routes: Iterable[Route]) -> None:
        http = [r for r in routes if r.type == HTTP]
        self._trees: dict[tuple[str, int], PathTree[Route]] = {}
        for route in http:
            if route.path == "/":
                self._trees.setdefault((route.domain.lower(), route.port), PathTree()).insert("/", route)
        for route in http:
            tree = self._trees.get((route.domain.lower(), route.port))
            if route.path != "/" and tree is not None:
                tree.insert(route.path, route)

    def lookup(self, host: str, path: str, port: int = 0) -> Route | None:
        """The route for a request on a listener (``port`` 0: a default one), or ``None`` (404)."""
        key = normalize_host(host)
        for candidate in domain_candidates(key):
            tree = self._trees.get((candidate, port))
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


def attempt_order(
    backends: Sequence[Backend],
    sticky: str | None,
    inflight: Mapping[str, int],
    rng: Callable[[int, int], int] | None = None,
) -> Iterator[Backend]:
    """The backends to try, one per attempt, as Flynn's ``eachBackend`` picks them: the sticky one
    first when present; then, for each attempt, two *distinct* random backends among those not yet
    tried and the one with fewer in-flight requests. Lazy: each retry chooses again with the
    in-flight counts of that moment. Flynn stops after 4 attempts (the caller's ``islice``)."""
    pick = rng or random.randint
    pool = list(backends)
    if sticky is not None:
        for index, backend in enumerate(pool):
            if backend.addr == sticky:
                yield pool.pop(index)
                break
    while pool:
        if len(pool) == 1:
            yield pool.pop()
            return
        n1, n2 = pick(0, len(pool) - 1), pick(0, len(pool) - 1)
        if n2 == n1:
            n2 = (n2 + 1) % len(pool)
        index = n2 if inflight.get(pool[n1].addr, 0) > inflight.get(pool[n2].addr, 0) else n1
        yield pool.pop(index)


def ordered_backends(backends: Sequence[Backend], sticky: str | None) -> list[Backend]:
    """Flynn's ``getOrderedBackends`` for Upgrade requests and TCP routes: shuffled, sticky first."""
    pool = list(backends)
    random.shuffle(pool)
    for index, backend in enumerate(pool):
        if backend.addr == sticky:
            pool.insert(0, pool.pop(index))
            break
    return pool


def choose_backends(
    backends: Sequence[Backend],
    sticky: str | None,
    inflight: Mapping[str, int],
    rng: Callable[[int, int], int] | None = None,
) -> list[Backend]:
    """Every backend in one list: the first attempt of :func:`attempt_order`, the rest shuffled
    (for callers that want a whole order up front)."""
    first = next(attempt_order(backends, sticky, inflight, rng), None)
    if first is None:
        return []
    rest = [b for b in backends if b is not first]
    random.shuffle(rest)
    return [first, *rest]
