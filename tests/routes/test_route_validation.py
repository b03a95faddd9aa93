"""Table tests of Flynn's route and app rules: pure functions, then the repository's pipeline."""

from __future__ import annotations

import pytest

from handlers.routes import errors as E
from handlers.routes import validation as V
from handlers.routes.model import Route
from handlers.routes.repository import RouteRepository

NAME_PATTERN_MSG = 'name String must match the pattern: "^[a-z\\d]+(-[a-z\\d]+)*$".'


@pytest.mark.parametrize("name", ["my-app", "a", "a1-b2-c3", "1", "x" * 100])
def test_valid_app_names(name: str) -> None:
    V.validate_app_name(name)


@pytest.mark.parametrize("name,message", [
    ("MyApp", NAME_PATTERN_MSG),
    ("a--b", NAME_PATTERN_MSG),
    ("-a", NAME_PATTERN_MSG),
    ("a-", NAME_PATTERN_MSG),
    ("a b", NAME_PATTERN_MSG),
    ("my_app", NAME_PATTERN_MSG),
    ("app\n", NAME_PATTERN_MSG),
    ("x" * 101, "name String length must be shorter than 100 characters."),
])
def test_invalid_app_names(name: str, message: str) -> None:
    with pytest.raises(E.FlynnError) as info:
        V.validate_app_name(name)
    err = info.value
    assert (err.status, err.code, err.message, err.detail) == (400, "validation_error", message, {"field": "name"})


def test_duplicate_app_name_is_object_exists(repo: RouteRepository) -> None:
    repo.create_app("x")
    with pytest.raises(E.FlynnError) as info:
        repo.create_app("x")
    assert (info.value.status, info.value.code, info.value.message) == (409, "object_exists", 'application "x" already exists')


def test_empty_app_name_is_generated(repo: RouteRepository) -> None:
    app = repo.create_app(None)
    V.validate_app_name(app.name)


@pytest.mark.parametrize("path,normalised", [("", "/"), ("/", "/"), ("/baz", "/baz/"), ("/a/b/", "/a/b/")])
def test_path_normalisation(path: str, normalised: str) -> None:
    assert V.normalize_path(path) == normalised


def route(**kw: object) -> Route:
    base = dict(type="http", service="svc", domain="d.example.com")
    base.update(kw)
    return Route(**base)  # type: ignore[arg-type]


ROOT = route(id="root", path="/")

# (route, others, used tcp ports, expected (status, code, message) or None for success)
PIPELINE = [
    pytest.param(route(type=""), [], set(), (400, "validation_error", E.TYPE_ENUM), id="type-missing"),
    pytest.param(route(type="udp"), [], set(), (400, "validation_error", E.TYPE_ENUM), id="type-udp"),
    pytest.param(route(port=8080), [], set(), (400, "validation_error", "Invalid route"), id="http-port"),
    pytest.param(route(type="tcp", port=80), [], set(), (409, "conflict", E.PORT_RESERVED), id="tcp-80"),
    pytest.param(route(type="tcp", port=443), [], set(), (409, "conflict", E.PORT_RESERVED), id="tcp-443"),
    pytest.param(route(path="noleadingslash/"), [], set(), (400, "validation_error", "Invalid route"), id="path-pattern"),
    pytest.param(route(path="/valid/"), [], set(), (400, "validation_error", "Invalid route"), id="no-root-route"),
    pytest.param(route(path="/valid/"), [ROOT.copy(domain="D.EXAMPLE.com")], set(), None, id="root-case-insensitive"),
    pytest.param(route(domain=""), [], set(), (400, "validation_error", "domain is invalid"), id="empty-domain"),
    pytest.param(route(service=""), [], set(), (400, "validation_error", "service is invalid"), id="empty-service"),
    pytest.param(route(type="tcp", port=70000), [], set(), (400, "validation_error", "port is invalid"), id="tcp-port-range"),
    pytest.param(route(type="tcp", port=65535), [], set(), (400, "validation_error", "port is invalid"), id="tcp-65535"),
    pytest.param(route(type="tcp", port=-5), [], set(), (400, "validation_error", "port is invalid"), id="tcp-negative"),
    pytest.param(route(port=-1), [], set(), (400, "validation_error", "port is invalid"), id="http-negative-port"),
    pytest.param(route(), [ROOT], set(), (409, "conflict", "Duplicate route"), id="duplicate-http"),
    pytest.param(route(domain="D.Example.COM"), [ROOT], set(), (409, "conflict", "Duplicate route"), id="duplicate-case"),
    pytest.param(route(type="tcp", port=3001), [route(type="tcp", port=3001, id="t")], set(), (409, "conflict", "Duplicate route"), id="duplicate-tcp"),
    pytest.param(route(type="tcp"), [], set(range(3000, 3501)), (500, "unknown_error", "Something went wrong"), id="no-free-port"),
    pytest.param(route(drain_backends=False), [route(id="o", domain="o.com", drain_backends=True)], set(), (400, "validation_error", "Invalid route"), id="drain-mismatch"),
    pytest.param(route(type="tcp", drain_backends=False), [route(id="o", domain="o.com", drain_backends=True)], set(), (400, "validation_error", "Invalid route"), id="drain-tcp-vs-http"),
    pytest.param(route(drain_backends=False), [route(type="tcp", id="o", port=3000, drain_backends=True)], set(), None, id="drain-ignores-tcp"),
    pytest.param(route(drain_backends=True), [route(id="o", domain="o.com", drain_backends=True)], set(), None, id="drain-match"),
    # order: the type check comes before everything, the port check before the drain check
    pytest.param(route(type="x", domain=""), [], set(), (400, "validation_error", E.TYPE_ENUM), id="order-type-first"),
    pytest.param(route(port=1, path="bad"), [], set(), (400, "validation_error", "Invalid route"), id="order-port-before-path"),
    pytest.param(route(path="/sub/", domain=""), [], set(), (400, "validation_error", "Invalid route"), id="order-path-before-domain"),
]


@pytest.mark.parametrize("candidate,others,used,expected", PIPELINE)
def test_create_pipeline(candidate: Route, others: list[Route], used: set[int], expected: tuple[int, str, str] | None) -> None:
    if expected is None:
        V.validate_route(candidate, others, used)
        return
    with pytest.raises(E.FlynnError) as info:
        V.validate_route(candidate, others, used)
    err = info.value
    assert (err.status, err.code, err.message) == expected
    if err.message in ("Invalid route", "Duplicate route", E.PORT_RESERVED):
        assert err.detail["type"] == candidate.type  # the route JSON is the detail
    if err.message.endswith(" is invalid"):
        assert err.detail == {"field": err.message.split()[0]}
    if err.code == "unknown_error":
        assert err.retry is True


def test_tcp_port_auto_assigned_first_free() -> None:
    assert V.validate_route(route(type="tcp"), [], {3000, 3001}).port == 3002


def test_certificate_pair(tls_pairs: dict[str, tuple[str, str]]) -> None:
    cert, key = tls_pairs["a"]
    assert V.check_certificate(f"\n  {cert}\n\n", f" {key}\n") == (cert.strip(), key.strip())


@pytest.mark.parametrize("which,message", [
    ("mismatch", "Certificate invalid: tls: private key does not match public key"),
    ("no-cert", "Certificate invalid: tls: failed to find any PEM data in certificate input"),
    ("no-key", "Certificate invalid: tls: failed to find any PEM data in key input"),
    ("key-is-cert", "Certificate invalid: tls: found a certificate rather than a key in the PEM for the private key"),
    ("cert-is-key", 'Certificate invalid: tls: failed to find "CERTIFICATE" PEM block in certificate input after skipping PEM blocks of the following types: [RSA PRIVATE KEY]'),
    ("garbage-key", "Certificate invalid: tls: failed to parse private key"),
])
def test_certificate_errors(tls_pairs: dict[str, tuple[str, str]], which: str, message: str) -> None:
    cert_a, key_a = tls_pairs["a"]
    _, key_b = tls_pairs["b"]
    garbage = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    cert, key = {
        "mismatch": (cert_a, key_b), "no-cert": ("", key_a), "no-key": (cert_a, "junk"),
        "key-is-cert": (cert_a, cert_a), "cert-is-key": (key_a, key_a), "garbage-key": (cert_a, garbage),
    }[which]
    if which == "cert-is-key" and "BEGIN RSA PRIVATE KEY" not in key_a:
        message = message.replace("RSA PRIVATE KEY", key_a.split("-----BEGIN ")[1].split("-----")[0])
    with pytest.raises(E.FlynnError) as info:
        V.check_certificate(cert, key)
    assert (info.value.status, info.value.code, info.value.message) == (400, "validation_error", message)
    assert key_a.strip() not in info.value.reason()


def test_certificate_validated_last(tls_pairs: dict[str, tuple[str, str]]) -> None:
    from handlers.routes.model import Certificate

    cert_a, _ = tls_pairs["a"]
    _, key_b = tls_pairs["b"]
    bad = route(certificate=Certificate(cert=cert_a, key=key_b))
    with pytest.raises(E.FlynnError) as info:
        V.validate_route(bad, [ROOT], set())
    assert info.value.message == "Duplicate route"
    with pytest.raises(E.FlynnError) as info:
        V.validate_route(bad, [], set())
    assert info.value.message.startswith("Certificate invalid: ")


def test_legacy_tls_fields_create_a_certificate(tls_pairs: dict[str, tuple[str, str]]) -> None:
    cert, key = tls_pairs["a"]
    out = V.validate_route(route(tls_cert=cert + "\n", tls_key=key), [], set())
    assert out.certificate is not None and out.certificate.cert == cert.strip()
    assert out.tls_cert == "" and "tls_cert" not in out.to_json()


@pytest.mark.parametrize("victim,others,blocked", [
    (ROOT, [route(id="sub", path="/bar/")], True),
    (ROOT, [route(id="sub", path="/bar/", domain="other.com")], False),
    (route(id="sub", path="/bar/"), [ROOT], False),
    (ROOT, [], False),
])
def test_delete_guard(victim: Route, others: list[Route], blocked: bool) -> None:
    if blocked:
        with pytest.raises(E.FlynnError) as info:
            V.check_delete(victim, [victim, *others])
        err = info.value
        assert (err.status, err.code, err.message, err.detail) == (400, "validation_error", "Route has dependent routes", None)
        assert "detail" not in err.to_json()
    else:
        V.check_delete(victim, [victim, *others])


# --- the same rules through the repository (state, transactions, update rules) ----------------

def test_tcp_ports_never_reused(repo: RouteRepository) -> None:
    repo.create_app("t")
    first = repo.create_route("t", Route(type="tcp", service="s"))
    second = repo.create_route("t", Route(type="tcp", service="s"))
    assert (first.port, second.port) == (3000, 3001)
    repo.delete_route("t", "tcp", first.id)
    third = repo.create_route("t", Route(type="tcp", service="s"))
    assert third.port == 3002


def test_paths_lifecycle(repo: RouteRepository) -> None:
    repo.create_app("p")
    root = repo.create_route("p", Route(type="http", service="s", domain="p.com"))
    bar = repo.create_route("p", Route(type="http", service="s", domain="p.com", path="/bar"))
    baz = repo.create_route("p", Route(type="http", service="s", domain="p.com", path="/baz/"))
    assert (root.path, bar.path, baz.path) == ("/", "/bar/", "/baz/")
    with pytest.raises(E.FlynnError, match="Route has dependent routes"):
        repo.delete_route("p", "http", root.id)
    repo.delete_route("p", "http", bar.id)
    repo.delete_route("p", "http", baz.id)
    repo.delete_route("p", "http", root.id)
    assert repo.list_routes("p") == []


def test_default_route_and_drain(home: object) -> None:
    repo = RouteRepository(default_domain="local.test")
    repo.create_app("shop")
    [default] = repo.list_routes("shop")
    assert (default.domain, default.service, default.drain_backends) == ("shop.local.test", "shop-web", True)
    with pytest.raises(E.FlynnError, match="Invalid route"):
        repo.create_route("shop", Route(type="http", service="shop-web", domain="shop.example.com"))
    ok = repo.create_route("shop", Route(type="http", service="shop-web", domain="shop.example.com", drain_backends=True))
    assert ok.drain_backends


def test_update_rules(repo: RouteRepository) -> None:
    repo.create_app("u")
    root = repo.create_route("u", Route(type="http", service="s", domain="u.com"))
    updated = repo.update_route("u", "http", root.id, Route(type="http", service="s2", domain="u.com", sticky=True,
                                                            drain_backends=True))
    assert (updated.id, updated.service, updated.sticky, updated.drain_backends) == (root.id, "s2", True, False)
    assert updated.created_at == root.created_at and updated.updated_at >= root.updated_at
    with pytest.raises(E.FlynnError) as info:
        repo.update_route("u", "http", root.id, Route(type="http", service="s", domain="other.com"))
    assert info.value.status == 404 and info.value.bare
    with pytest.raises(E.FlynnError, match="Invalid route"):
        repo.update_route("u", "http", root.id, Route(type="http", service="s", domain="u.com", port=8080))
    tcp = repo.create_route("u", Route(type="tcp", service="t"))
    with pytest.raises(E.FlynnError, match="Port reserved"):
        repo.update_route("u", "tcp", tcp.id, Route(type="tcp", service="t", port=443))
    moved = repo.update_route("u", "tcp", tcp.id, Route(type="tcp", service="t", port=4000, leader=True))
    assert (moved.port, moved.leader) == (4000, True)


def test_ownership_and_lookup(repo: RouteRepository) -> None:
    a, b = repo.create_app("a"), repo.create_app("b")
    r = repo.create_route("a", Route(type="http", service="s", domain="a.com"))
    assert repo.get_route(a.id, "http", r.id) == repo.get_route("a", "http", r.id)
    for app_ref, kind in (("b", "http"), ("a", "tcp"), ("nope", "http")):
        with pytest.raises(E.FlynnError) as info:
            repo.get_route(app_ref, kind, r.id)
        assert info.value.bare and info.value.status == 404
    with pytest.raises(E.FlynnError):
        repo.delete_route(b.id, "http", r.id)
    assert repo.list_routes("b") == []


def test_lists_newest_first(repo: RouteRepository) -> None:
    repo.create_app("l")
    first = repo.create_route("l", Route(type="tcp", service="s"))
    second = repo.create_route("l", Route(type="tcp", service="s"))
    assert [r.id for r in repo.list_routes()] == [second.id, first.id]


def test_events_for_create_update_delete(repo: RouteRepository) -> None:
    app = repo.create_app("e")
    r = repo.create_route("e", Route(type="tcp", service="s"))
    repo.update_route("e", "tcp", r.id, Route(type="tcp", service="s2"))
    repo.delete_route("e", "tcp", r.id)
    events = repo.list_events(object_types=["route", "route_deletion"], ascending=True)
    assert [e.object_type for e in events] == ["route", "route", "route_deletion"]
    assert {e.object_id for e in events} == {r.id} and {e.app for e in events} == {app.id}
    assert events[1].data["service"] == "s2" and events[2].data["service"] == "s2"


def test_certificate_dedup_and_key_not_in_events(repo: RouteRepository, tls_pairs: dict[str, tuple[str, str]]) -> None:
    from handlers.routes.model import Certificate

    cert, key = tls_pairs["a"]
    repo.create_app("c")
    r1 = repo.create_route("c", Route(type="http", service="s", domain="a.example.com",
                                      certificate=Certificate(cert=cert, key=key)))
    r2 = repo.create_route("c", Route(type="http", service="s", domain="b.example.com",
                                      certificate=Certificate(cert=" " + cert, key=key)))
    assert r1.certificate.id == r2.certificate.id
    assert repo.get_route("c", "http", r1.id).certificate.key == key.strip()
    for event in repo.list_events():
        assert key.strip() not in str(event.data)


def test_concurrent_creates_conflict_in_the_transaction(repo: RouteRepository) -> None:
    """Two writers racing for the same (domain, path) and for auto-assigned ports: one wins each."""
    from concurrent.futures import ThreadPoolExecutor

    repo.create_app("race")

    def attempt(kind: str) -> str:
        other = RouteRepository(repo.path)  # separate connections, as separate processes would use
        try:
            if kind == "http":
                other.create_route("race", Route(type="http", service="s", domain="race.com"))
            else:
                return str(other.create_route("race", Route(type="tcp", service="s")).port)
            return "ok"
        except E.FlynnError as exc:
            return exc.message

    with ThreadPoolExecutor(8) as pool:
        http_results = list(pool.map(attempt, ["http"] * 8))
        tcp_ports = list(pool.map(attempt, ["tcp"] * 8))
    assert sorted(http_results) == ["Duplicate route"] * 7 + ["ok"]
    assert sorted(map(int, tcp_ports)) == list(range(3000, 3008))
