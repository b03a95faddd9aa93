"""Table tests of the router's matching rules (spec §9 and Flynn's router tests)."""

from __future__ import annotations

import pytest

from handlers.routes.matching import (
    Backend, PathTree, RouteTable, candidates, choose_backends, domain_candidates, normalize_host,
)
from handlers.routes.model import Route


def http(domain: str, path: str = "/", service: str = "svc") -> Route:
    return Route(type="http", domain=domain, path=path, service=service, id=f"{domain}{path}")


@pytest.mark.parametrize("host,expected", [
    ("FOO.bar:8080", "foo.bar"),
    ("Example.COM", "example.com"),
    ("example.com:80", "example.com"),
    ("[::1]:8080", "[::1]"),
    ("127.0.0.1:9", "127.0.0.1"),
])
def test_host_is_lowercased_and_port_stripped(host: str, expected: str) -> None:
    assert normalize_host(host) == expected


@pytest.mark.parametrize("host,expected", [
    ("flynn.foo.bar", ["flynn.foo.bar", "*.flynn.foo.bar", "*.foo.bar", "*.bar", "*"]),
    ("foo.bar", ["foo.bar", "*.foo.bar", "*.bar", "*"]),
    ("a.b.c.d.e.f", ["a.b.c.d.e.f", "*.a.b.c.d.e.f", "*.b.c.d.e.f", "*.c.d.e.f", "*.d.e.f", "*.e.f", "*"]),
    ("localhost", ["localhost", "*.localhost", "*"]),
])
def test_domain_lookup_order(host: str, expected: list[str]) -> None:
    assert domain_candidates(host) == expected


WILDCARD_TABLE = [http("dev.foo.bar", service="exact"), http("*.foo.bar", service="wild"),
                  http("*.bar", service="bar"), http("*", service="all")]


@pytest.mark.parametrize("host,service", [
    ("dev.foo.bar", "exact"),          # TestWildcardRouting: exact beats wildcard
    ("DEV.foo.bar:8080", "exact"),     # TestCaseInsensitiveDomain
    ("flynn.foo.bar", "wild"),
    ("foo.bar", "wild"),               # the apex matches its own wildcard (derived)
    ("x.y.bar", "bar"),                # TestWildcardCatchAllRouting: *.bar beats *
    ("elsewhere.org", "all"),          # catch-all
])
def test_domain_precedence(host: str, service: str) -> None:
    route = RouteTable(WILDCARD_TABLE).lookup(host, "/")
    assert route is not None and route.service == service


def test_more_than_five_labels_never_tries_single_label_wildcard() -> None:
    table = RouteTable([http("*.f", service="f")])
    assert table.lookup("a.b.c.d.e.f", "/") is None
    assert table.lookup("e.f", "/").service == "f"


def test_no_route_is_none() -> None:
    assert RouteTable([http("a.com")]).lookup("b.com", "/") is None


TREE_PATHS = ["/", "/a/", "/a/b/", "/a/c/d/c/", "/2/"]


@pytest.mark.parametrize("request_path,expected", [
    ("/a/xyz", "/a/"),              # TestTree
    ("/a/c/d", "/a/"),              # only /a/c/d/c/ below /a/
    ("/a/c/d/c/x", "/a/c/d/c/"),
    ("/xyz", "/"),
    ("/2", "/2/"),                  # TestPathRouting
    ("/abc", "/"),                  # segment match: /abc is not under /a/
    ("//a", "/a/"),                 # TestDoubleSlashPath
    ("/a//b/", "/a/b/"),
    ("/A/", "/"),                   # paths are case-sensitive
    ("/", "/"),
])
def test_path_tree_segment_prefix(request_path: str, expected: str) -> None:
    tree: PathTree[str] = PathTree()
    for path in TREE_PATHS:
        tree.insert(path, path)
    assert tree.lookup(request_path) == expected


def test_path_routes_need_a_root_route_on_the_domain() -> None:
    table = RouteTable([http("orphan.com", "/api/"), http("ok.com", "/"), http("ok.com", "/api/", service="api")])
    assert table.lookup("orphan.com", "/api/x") is None
    assert table.lookup("ok.com", "/api/x").service == "api"
    assert table.lookup("ok.com", "/apix").service == "svc"


def test_tcp_routes_are_not_in_the_http_table() -> None:
    assert RouteTable([Route(type="tcp", port=3000, service="s")]).lookup("x", "/") is None


BACKENDS = [Backend("10.0.0.1:1"), Backend("10.0.0.2:1", leader=True), Backend("10.0.0.3:1")]


@pytest.mark.parametrize("backends,leader_only,expected", [
    (BACKENDS, False, [b.addr for b in BACKENDS]),
    (BACKENDS, True, ["10.0.0.2:1"]),                                   # flagged leader
    ([Backend("a:1"), Backend("b:1")], True, ["a:1"]),                  # else the first entry
    ([], True, []),
])
def test_leader_candidates(backends: list[Backend], leader_only: bool, expected: list[str]) -> None:
    assert [b.addr for b in candidates(backends, leader_only)] == expected


def test_sticky_backend_is_tried_first_when_present() -> None:
    order = choose_backends(BACKENDS, "10.0.0.3:1", {}, rng=lambda a, b: 0)
    assert order[0].addr == "10.0.0.3:1" and len(order) == 3


def test_unknown_sticky_backend_falls_back_to_two_choices() -> None:
    picks = iter([0, 2])
    order = choose_backends(BACKENDS, "10.9.9.9:1", {"10.0.0.1:1": 5}, rng=lambda a, b: next(picks))
    assert order[0].addr == "10.0.0.3:1"  # fewer in-flight requests wins


def test_two_choices_prefers_fewer_inflight() -> None:
    picks = iter([1, 0])
    order = choose_backends(BACKENDS, None, {"10.0.0.2:1": 3, "10.0.0.1:1": 1}, rng=lambda a, b: next(picks))
    assert order[0].addr == "10.0.0.1:1"
    assert {b.addr for b in order} == {b.addr for b in BACKENDS}


def test_no_backends_gives_empty_order() -> None:
    assert choose_backends([], None, {}) == []
