"""Custom::App / Custom::Route through the framework: local and flynn backends, Reasons, Data."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from crhelper.testing import ResponseServer, make_event
from handlers.routes.backends import RouterConfig
from handlers.routes.controller import Controller, ControllerThread, parse_keys
from handlers.routes.provider import build_provider
from handlers.routes.repository import RouteRepository

KEY = "controller-key-123"


class Stack:
    """Sends ROS requests to a provider and returns the posted responses."""

    def __init__(self, provider: Any, server: ResponseServer) -> None:
        self.provider, self.server = provider, server

    def send(self, request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
        event = self.server.attach(make_event(request_type, resource_type, props, **kw))
        self.provider.handle(event)
        return self.server.wait_for(event["RequestId"], timeout=5)

    def ok(self, request_type: str, resource_type: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
        body = self.send(request_type, resource_type, props, **kw)
        assert body["Status"] == "SUCCESS", body.get("Reason")
        return body


@pytest.fixture()
def response_server() -> Iterator[ResponseServer]:
    with ResponseServer() as server:
        yield server
        assert server.violations == []


@pytest.fixture()
def local(home: Path, response_server: ResponseServer) -> Stack:
    config = RouterConfig(db_path=str(home / "router" / "routes.db"), http_port=8080)
    return Stack(build_provider(config), response_server)


def test_app_lifecycle_and_data(local: Stack, home: Path) -> None:
    created = local.ok("Create", "Custom::App", {"Name": "shop", "Meta": {"team": "web"}, "ServiceToken": "acs:fc:x"})
    app_id = created["PhysicalResourceId"]
    assert created["Data"] == {"AppId": app_id, "Name": "shop"}
    updated = local.ok("Update", "Custom::App", {"Name": "shop", "Meta": {"team": "ops"}},
                       old_properties={"Name": "shop"}, physical_resource_id=app_id)
    assert updated["PhysicalResourceId"] == app_id
    repo = RouteRepository(home / "router" / "routes.db")
    assert repo.get_app("shop").meta == {"team": "ops"}
    renamed = local.send("Update", "Custom::App", {"Name": "other"}, old_properties={"Name": "shop"},
                         physical_resource_id=app_id)
    assert renamed["Status"] == "FAILED" and renamed["Reason"].startswith("validation_error: ")
    local.ok("Delete", "Custom::App", {"Name": "shop"}, physical_resource_id=app_id)
    local.ok("Delete", "Custom::App", {"Name": "shop"}, physical_resource_id=app_id)  # idempotent
    assert repo.list_apps() == []


@pytest.mark.parametrize("props,reason", [
    ({"Name": "MyApp"}, 'validation_error: name String must match the pattern: "^[a-z\\d]+(-[a-z\\d]+)*$".'),
    ({"Name": "x" * 101}, "validation_error: name String length must be shorter than 100 characters."),
    ({"Name": "ok", "Colour": "red"}, "validation_error: Colour is not a known property (allowed: Name, Meta)"),
])
def test_app_failures(local: Stack, props: dict[str, Any], reason: str) -> None:
    body = local.send("Create", "Custom::App", props)
    assert (body["Status"], body["Reason"]) == ("FAILED", reason)


def test_duplicate_app(local: Stack) -> None:
    local.ok("Create", "Custom::App", {"Name": "dup"})
    body = local.send("Create", "Custom::App", {"Name": "dup"})
    assert body["Reason"] == 'object_exists: application "dup" already exists'


def route_props(**kw: Any) -> dict[str, Any]:
    props = {"App": "web", "Type": "http", "Service": "web-web", "Domain": "web.example.com"}
    props.update(kw)
    return props


ROUTE_FAILURES = [
    (route_props(Type="udp"), "validation_error: type Enum error. The data must be equal to one of these values [http tcp]."),
    (route_props(Type=None), "validation_error: type Enum error. The data must be equal to one of these values [http tcp]."),
    (route_props(Port=8080), "validation_error: Invalid route (Port: HTTP routes take no port)"),
    (route_props(Type="tcp", Port="80"), "conflict: Port reserved for HTTP/HTTPS traffic (Port: 80 and 443 are reserved)"),
    (route_props(Path="noleadingslash/"), "validation_error: Invalid route (Path: must start with / (pattern ^/(.*/)?$))"),
    (route_props(Domain="new.example.com", Path="/api"), "validation_error: Invalid route (Path: a sub-path needs a / route for the same domain first)"),
    (route_props(Domain=""), "validation_error: domain is invalid (Domain: required for HTTP routes)"),
    (route_props(Service=""), "validation_error: service is invalid (Service: required)"),
    (route_props(Port="abc"), "syntax_error: The provided JSON input is invalid (Port: must be an integer)"),
    (route_props(Sticky="yes"), "syntax_error: The provided JSON input is invalid (Sticky: must be a boolean (true or false))"),
    (route_props(Weight=3), "validation_error: Weight is not a known property (allowed: App, Type, Service, Domain, Path, Port, Sticky, Leader, DrainBackends, DisableKeepAlives, Certificate)"),
    (route_props(App="missing-app"), "not_found: Not found (App: no app named or with id missing-app)"),
    (route_props(App=""), "validation_error: app is invalid (App: the app name or id is required)"),
]


@pytest.mark.parametrize("props,reason", ROUTE_FAILURES)
def test_route_failures(local: Stack, props: dict[str, Any], reason: str) -> None:
    local.ok("Create", "Custom::App", {"Name": "web"})
    body = local.send("Create", "Custom::Route", {k: v for k, v in props.items() if v is not None})
    assert (body["Status"], body["Reason"]) == ("FAILED", reason)


def test_route_lifecycle_data_and_conflicts(local: Stack, tls_pairs: dict[str, tuple[str, str]],
                                            capfd: pytest.CaptureFixture[str]) -> None:
    app = local.ok("Create", "Custom::App", {"Name": "web"})["Data"]
    cert, key = tls_pairs["a"]
    root = local.ok("Create", "Custom::Route", route_props(Certificate={"Cert": cert, "Key": key}))
    rid = root["PhysicalResourceId"]
    assert rid.startswith("http/")
    data = root["Data"]
    assert key.strip() not in str(root) and "Key" not in str(data)
    assert data == {"RouteId": rid, "Type": "http", "AppId": app["AppId"], "AppName": "web", "Service": "web-web",
                    "Domain": "web.example.com", "Path": "/", "Port": 0, "Url": "https://web.example.com:4433/",
                    "CertificateId": data["CertificateId"]}
    dup = local.send("Create", "Custom::Route", route_props(App=app["AppId"]))
    assert dup["Reason"] == "conflict: Duplicate route (Domain and Path)"
    sub = local.ok("Create", "Custom::Route", route_props(Path="/api"))
    assert sub["Data"]["Path"] == "/api/" and sub["Data"]["Url"] == "http://web.example.com:8080/api/"
    blocked = local.send("Delete", "Custom::Route", route_props(), physical_resource_id=rid)
    assert blocked["Reason"].startswith("validation_error: Route has dependent routes")
    _, other_key = tls_pairs["b"]
    bad_cert = local.send("Update", "Custom::Route", route_props(Certificate={"Cert": cert, "Key": other_key}),
                          old_properties=route_props(), physical_resource_id=rid)
    assert bad_cert["Reason"].startswith("validation_error: Certificate invalid: tls: private key does not match public key")
    assert other_key.strip() not in bad_cert["Reason"]
    moved = local.send("Update", "Custom::Route", route_props(Domain="moved.example.com"),
                       old_properties=route_props(), physical_resource_id=rid)
    assert moved["Reason"].startswith("not_found: ")
    retyped = local.send("Update", "Custom::Route", route_props(Type="tcp"), old_properties=route_props(),
                         physical_resource_id=rid)
    assert retyped["Reason"].startswith("validation_error: Invalid route (Type:")
    updated = local.ok("Update", "Custom::Route", route_props(Service="web-v2", Sticky=True),
                       old_properties=route_props(), physical_resource_id=rid)
    assert updated["PhysicalResourceId"] == rid and updated["Data"]["Service"] == "web-v2"
    local.ok("Delete", "Custom::Route", route_props(Path="/api"), physical_resource_id=sub["PhysicalResourceId"])
    local.ok("Delete", "Custom::Route", route_props(), physical_resource_id=rid)
    local.ok("Delete", "Custom::Route", route_props(), physical_resource_id=rid)  # already gone
    local.ok("Delete", "Custom::Route", route_props(), physical_resource_id="crhelper:CREATE_FAILED")
    logged = capfd.readouterr()
    assert "crhelper" in logged.out + logged.err  # the framework did log these requests
    for secret in (key, other_key):
        assert secret.splitlines()[1] not in logged.out + logged.err


def test_tcp_route_data(local: Stack) -> None:
    local.ok("Create", "Custom::App", {"Name": "web"})
    body = local.ok("Create", "Custom::Route", {"App": "web", "Type": "tcp", "Service": "db"})
    data = body["Data"]
    assert (data["Type"], data["Port"], data["Url"], data["Domain"], data["Path"]) == ("tcp", 3000, "tcp://127.0.0.1:3000", "", "")
    same = local.ok("Update", "Custom::Route", {"App": "web", "Type": "tcp", "Service": "db", "Leader": "true"},
                    old_properties={"App": "web", "Type": "tcp", "Service": "db"},
                    physical_resource_id=body["PhysicalResourceId"])
    assert same["Data"]["Port"] == 3000


# --- the flynn backend against the local controller ---------------------------------------

@pytest.fixture()
def controller(repo: RouteRepository) -> Iterator[ControllerThread]:
    with ControllerThread(Controller(repo, parse_keys(KEY))) as server:
        yield server


def flynn_stack(url: str, key: str, server: ResponseServer) -> Stack:
    return Stack(build_provider(RouterConfig(backend="flynn", flynn_url=url, flynn_key=key, http_port=80)), server)


def test_flynn_backend_end_to_end(controller: ControllerThread, repo: RouteRepository,
                                  response_server: ResponseServer) -> None:
    stack = flynn_stack(controller.url, KEY, response_server)
    app = stack.ok("Create", "Custom::App", {"Name": "remote"})
    assert repo.get_app("remote").id == app["PhysicalResourceId"]
    root = stack.ok("Create", "Custom::Route", {"App": "remote", "Type": "http", "Service": "remote-web",
                                                "Domain": "remote.example.com", "Sticky": True})
    assert root["Data"]["Url"] == "http://remote.example.com/"
    stored = repo.get_route("remote", "http", root["PhysicalResourceId"].split("/")[1])
    assert stored.sticky and stored.service == "remote-web"
    failures = {
        "conflict: Port reserved for HTTP/HTTPS traffic": {"App": "remote", "Type": "tcp", "Service": "s", "Port": 443},
        "conflict: Duplicate route": {"App": "remote", "Type": "http", "Service": "x", "Domain": "remote.example.com"},
        "validation_error: Invalid route": {"App": "remote", "Type": "http", "Service": "x", "Domain": "n.com", "Path": "/a"},
        "not_found: Not found (App: no app nope)": {"App": "nope", "Type": "tcp", "Service": "s"},
    }
    for reason, props in failures.items():
        body = stack.send("Create", "Custom::Route", props)
        assert (body["Status"], body["Reason"]) == ("FAILED", reason)
    updated = stack.ok("Update", "Custom::Route", {"App": "remote", "Type": "http", "Service": "v2",
                                                   "Domain": "remote.example.com"},
                       old_properties={"App": "remote"}, physical_resource_id=root["PhysicalResourceId"])
    assert updated["Data"]["Service"] == "v2"
    stack.ok("Delete", "Custom::Route", {"App": "remote"}, physical_resource_id=root["PhysicalResourceId"])
    stack.ok("Delete", "Custom::App", {"Name": "remote"}, physical_resource_id=app["PhysicalResourceId"])
    assert repo.list_apps() == [] and repo.list_routes() == []


@pytest.mark.parametrize("key", ["wrong-key", KEY + "x", KEY[:-1]])
def test_flynn_backend_bad_key(controller: ControllerThread, response_server: ResponseServer, key: str) -> None:
    stack = flynn_stack(controller.url, key, response_server)
    body = stack.send("Create", "Custom::App", {"Name": "denied"})
    assert (body["Status"], body["Reason"]) == ("FAILED", "unauthorized: Unauthorized (the controller key was rejected)")
    assert key not in str(body)


def test_flynn_backend_unreachable(response_server: ResponseServer) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    stack = flynn_stack(f"http://127.0.0.1:{port}", KEY, response_server)
    body = stack.send("Create", "Custom::App", {"Name": "x"})
    assert body["Reason"] == "unknown_error: Something went wrong (controller unreachable: ConnectionError)"
