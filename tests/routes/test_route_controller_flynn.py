"""The local controller where Flynn's own code decides (flynn/flynn c283e9f5): app strategy,
deploy timeout, ids and default meta (controller/data/app.go, schema/controller/app.json), the
event endpoints (controller/events.go), and the content types Go's net/http sends."""

from __future__ import annotations

import json
from typing import Any, Iterator

import pytest
import requests

from handlers.routes.controller import Controller, ControllerThread, parse_keys
from handlers.routes.repository import RouteRepository

AUTH = {"Authorization": "Basic OnMzY3IzdA=="}
STRATEGY_ENUM = ("strategy Enum error. The data must be equal to one of these values "
                 "[all-at-once one-by-one sirenia discoverd-meta one-down-one-up in-batches].")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One controller for the module (tests use distinct app names): starting one costs ~80 ms."""
    repo = RouteRepository(tmp_path_factory.mktemp("controller") / "routes.db")
    with ControllerThread(Controller(repo, parse_keys("s3cr3t"), poll_interval=0.05)) as server:
        yield server.url


def call(url: str, method: str, path: str, body: Any = None, **kw: Any) -> requests.Response:
    headers = {**AUTH, **kw.pop("headers", {})}
    if body is not None:
        kw["data"] = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    return requests.request(method, url + path, headers=headers, timeout=5, **kw)


def error(resp: requests.Response) -> tuple[int, str, str, Any]:
    body = resp.json()
    return resp.status_code, body["code"], body["message"], body.get("detail")


# --- apps ----------------------------------------------------------------------------------------

def test_create_fills_flynns_defaults_and_keeps_a_chosen_id(url: str) -> None:
    plain = call(url, "POST", "/apps", {"name": "plain"}).json()
    assert plain["strategy"] == "all-at-once" and plain["deploy_timeout"] == 120
    assert plain["meta"] == {"gc.max_inactive_slug_releases": "10"}
    chosen = "9D0E3C1A6B2F4E7A8C5D1F2E3A4B5C6D"  # any form Postgres' uuid reads; kept canonical
    app = call(url, "POST", "/apps", {"id": chosen, "name": "chosen", "strategy": "one-by-one",
                                      "deploy_timeout": 300, "meta": {"team": "web"}}).json()
    assert app["id"] == "9d0e3c1a-6b2f-4e7a-8c5d-1f2e3a4b5c6d"
    assert (app["strategy"], app["deploy_timeout"]) == ("one-by-one", 300)
    assert app["meta"] == {"team": "web", "gc.max_inactive_slug_releases": "10"}
    assert call(url, "GET", f"/apps/{app['id']}").json() == app
    assert call(url, "GET", "/apps/chosen").json()["id"] == app["id"]
    again = call(url, "POST", "/apps", {"id": app["id"], "name": "other"})
    assert error(again)[:2] == (409, "object_exists")


@pytest.mark.parametrize("body,expected", [
    ({"name": "s", "strategy": "rolling"}, (400, "validation_error", STRATEGY_ENUM, {"field": "strategy"})),
    ({"name": "m", "meta": {"replicas": 3}}, (400, "syntax_error", "The provided JSON input is invalid", None)),
    ({"name": "m", "meta": ["a"]}, (400, "syntax_error", "The provided JSON input is invalid", None)),
    ({"name": "t", "deploy_timeout": "60"}, (400, "syntax_error", "The provided JSON input is invalid", None)),
    ({"name": "t", "deploy_timeout": 1.5}, (400, "syntax_error", "The provided JSON input is invalid", None)),
    ({"name": "i", "id": "not-a-uuid"}, (400, "validation_error", "id is invalid", {"field": "id"})),
])
def test_create_errors_as_flynn(url: str, body: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert error(call(url, "POST", "/apps", body)) == expected


def test_update_strategy_timeout_and_schema_messages(url: str) -> None:
    call(url, "POST", "/apps", {"name": "up"})
    app = call(url, "POST", "/apps/up", {"strategy": "in-batches", "deploy_timeout": 30, "meta": None}).json()
    assert (app["strategy"], app["deploy_timeout"]) == ("in-batches", 30)
    assert app["meta"] == {"gc.max_inactive_slug_releases": "10"}  # meta: null leaves it
    assert call(url, "GET", "/apps/up").json()["strategy"] == "in-batches"
    anyof = "meta Validation failed for each schema in 'anyOf'."
    assert error(call(url, "POST", "/apps/up", {"meta": {"n": 1}})) == (400, "validation_error", anyof, {"field": "meta"})
    assert error(call(url, "POST", "/apps/up", {"meta": "x"}))[2] == anyof
    assert error(call(url, "POST", "/apps/up", {"strategy": "nope"})) == (400, "validation_error", STRATEGY_ENUM,
                                                                          {"field": "strategy"})
    assert error(call(url, "POST", "/apps/up", {"deploy_timeout": "9"}))[2] == \
        "deploy_timeout Value must be one of these types: [integer]. Got string"
    assert error(call(url, "POST", "/apps/up", {"colour": "red"}))[2] == \
        'Additional properties aren\'t allowed, found "colour" as one of its keys'
    assert call(url, "GET", "/apps/up").json()["deploy_timeout"] == 30  # nothing half-applied


# --- events --------------------------------------------------------------------------------------

def _events(url: str, **params: Any) -> requests.Response:
    return call(url, "GET", "/events", params=params, headers={"Accept": "application/json"})


def test_get_one_event_and_app_id_by_name(url: str) -> None:
    app = call(url, "POST", "/apps", {"name": "ev"}).json()
    call(url, "POST", "/apps", {"name": "other"})
    listed = _events(url, app_id="ev").json()
    assert listed == _events(url, app_id=app["id"]).json()
    assert [e["object_id"] for e in listed] == [app["id"]] and listed[0]["app"] == app["id"]
    one = call(url, "GET", f"/events/{listed[0]['id']}")
    assert one.status_code == 200 and one.json() == listed[0]
    assert one.headers["Content-Type"] == "application/json"
    missing = call(url, "GET", "/events/999999")
    assert (missing.status_code, missing.content, missing.headers.get("Content-Type")) == (404, b"", None)
    assert error(call(url, "GET", "/events/abc")) == (400, "validation_error", "id is invalid", {"field": "id"})
    unknown = _events(url, app_id="no-such-app")
    assert (unknown.status_code, unknown.content) == (404, b"")


def _stream(url: str, headers: dict[str, str] | None = None, **params: Any) -> requests.Response:
    return requests.get(url + "/events", params=params, headers={**AUTH, **(headers or {})}, timeout=5, stream=True)


def _frames(lines: Iterator[bytes], n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in lines:
        if line.startswith(b"data: "):
            out.append(json.loads(line[6:]))
            if len(out) == n:
                break
    return out


def test_stream_count_last_event_id_and_exact_accept(url: str) -> None:
    for name in ("a1", "a2", "a3", "a4"):
        call(url, "POST", "/apps", {"name": name})
    ids = [e["id"] for e in reversed(_events(url, count=4).json())]
    # Any Accept but exactly application/json is the stream (Flynn compares the header whole).
    with _stream(url, {"Accept": "application/json, text/event-stream"}, past="true", count="2") as resp:
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        lines = resp.iter_lines(chunk_size=1)
        assert [e["id"] for e in _frames(lines, 2)] == ids[-2:]
        call(url, "POST", "/apps", {"name": "a5"})  # then it follows
        assert _frames(lines, 1)[0]["data"]["name"] == "a5"
    with _stream(url, {"Last-Event-Id": str(ids[1])}) as resp:
        assert [e["id"] for e in _frames(resp.iter_lines(chunk_size=1), 3)] == [*ids[2:], ids[-1] + 1]
    bad = _stream(url, {"Last-Event-Id": "twelve"})
    assert error(bad) == (400, "validation_error", "Last-Event-Id is invalid", {"field": "Last-Event-Id"})
    assert error(_stream(url, count="many"))[2] == "count is invalid"
    assert error(_events(url, before_id="x"))[2] == "before_id is invalid"


# --- content types -------------------------------------------------------------------------------

def test_empty_bodies_have_no_content_type_and_texts_carry_charset(url: str) -> None:
    """Go >= 1.10 sends no Content-Type with an empty body (Flynn builds with 1.13.1); http.Error's
    texts are ``text/plain; charset=utf-8``."""
    call(url, "POST", "/apps", {"name": "ct"})
    route = call(url, "POST", "/apps/ct/routes", {"type": "http", "service": "s", "domain": "ct.example.com"}).json()
    empties = [
        requests.get(url + "/apps", timeout=5),                      # 401
        requests.get(url + "/ping", timeout=5),                      # 200
        call(url, "GET", "/apps/nobody"),                            # bare 404
        call(url, "DELETE", f"/apps/ct/routes/http/{route['id']}"),  # 200
    ]
    assert [(r.status_code, r.content, r.headers.get("Content-Type")) for r in empties] == [
        (401, b"", None), (200, b"", None), (404, b"", None), (200, b"", None)]
    unknown = call(url, "GET", "/no/such/path")
    assert (unknown.status_code, unknown.text) == (404, "404 page not found\n")
    assert unknown.headers["Content-Type"] == "text/plain; charset=utf-8"
    wrong = call(url, "PATCH", "/apps")
    assert (wrong.status_code, wrong.text, wrong.headers["Content-Type"]) == (
        405, "Method Not Allowed\n", "text/plain; charset=utf-8")
    assert call(url, "GET", "/apps").headers["Content-Type"] == "application/json"
