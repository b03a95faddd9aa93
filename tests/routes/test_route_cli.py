"""The ``router`` CLI commands, event following, the service registry and the sticky cookie."""

from __future__ import annotations

import argparse
import base64
import json
import threading
from pathlib import Path

import pytest

from handlers.routes import cli
from handlers.routes.events import follow, format_event
from handlers.routes.model import Route
from handlers.routes.registry import ServiceRegistry, parse_registry, register, unregister
from handlers.routes.repository import RouteRepository
from handlers.routes.sticky import CookieSealer, load_key


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="crhelper")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_routes_and_events_commands(repo: RouteRepository, capsys: pytest.CaptureFixture[str]) -> None:
    repo.create_app("cli")
    http = repo.create_route("cli", Route(type="http", service="web", domain="cli.example.com", sticky=True))
    tcp = repo.create_route("cli", Route(type="tcp", service="db"))
    assert run(["router", "routes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"tcp/{tcp.id}  :3000  -> db", f"http/{http.id}  cli.example.com/  -> web  sticky"]
    assert run(["router", "routes", "--json", "--app", "cli"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == [tcp.id, http.id]
    assert run(["router", "routes", "--app", "missing"]) == 1
    assert "not_found" in capsys.readouterr().err
    repo.delete_route("cli", "tcp", tcp.id)
    assert run(["router", "events"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in lines] == ["route", "route", "route_deletion"]
    assert lines[2].endswith(f"tcp/{tcp.id} :3000 -> db")
    assert run(["router", "events", "--json", "--all-types", "--count", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["object_type"] == "route_deletion"


def test_follow_yields_new_events(repo: RouteRepository) -> None:
    repo.create_app("f")
    first = repo.create_route("f", Route(type="tcp", service="s"))
    stop = threading.Event()
    seen: list[str] = []

    def consume() -> None:
        for event in follow(repo, poll_interval=0.02, should_stop=stop.is_set):
            seen.append(event.object_id)
            if len(seen) == 2:
                stop.set()

    thread = threading.Thread(target=consume)
    thread.start()
    second = repo.create_route("f", Route(type="tcp", service="s"))
    thread.join(5)
    assert not thread.is_alive() and seen == [first.id, second.id]
    assert "tcp/" in format_event(repo.list_events(count=1)[0])


def test_services_command(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["router", "services", "register", "web", "127.0.0.1:1"]) == 0
    assert run(["router", "services", "register", "web", "127.0.0.1:2", "--leader"]) == 0
    assert run(["router", "services", "list"]) == 0
    assert capsys.readouterr().out.strip() == "web: 127.0.0.1:1, 127.0.0.1:2 (leader)"
    assert run(["router", "services", "register", "web"]) == 2
    assert run(["router", "services", "unregister", "web", "127.0.0.1:2"]) == 0
    assert [b.addr for b in ServiceRegistry().backends("web")] == ["127.0.0.1:1"]


def test_registry_file_and_api(home: Path) -> None:
    path = home / "svc.json"
    register("a", "h:1", path=path)
    register("a", "h:2", leader=True, path=path)
    register("a", "h:3", leader=True, path=path)
    registry = ServiceRegistry(path)
    assert [(b.addr, b.leader) for b in registry.backends("a")] == [("h:1", False), ("h:2", False), ("h:3", True)]
    unregister("a", "h:1", path=path)
    unregister("a", "h:2", path=path)
    unregister("a", "h:3", path=path)
    assert json.loads(path.read_text()) == {}
    assert registry.backends("a") == []


@pytest.mark.parametrize("raw,message", [
    ([], "top level must be an object"),
    ({"s": "h:1"}, "services['s']: must be a list"),
    ({"s": [1]}, "services['s']: each entry must be"),
    ({"s": [{"leader": True}]}, "services['s']: each entry must be"),
])
def test_registry_errors_name_the_service(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_registry(raw)


def test_sticky_cookie_sealing(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = load_key()
    assert load_key() == key and len(key) == 32  # created once, then reused
    sealer = CookieSealer(key)
    sealed = sealer.seal("127.0.0.1:8080")
    assert "127.0.0.1" not in base64.b64decode(sealed).decode("latin-1")
    assert sealer.open(sealed) == "127.0.0.1:8080"
    raw = base64.b64decode(sealed)
    tampered = base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 0x01])).decode()  # always a different last byte
    for bad in (tampered, "not base64!", "", base64.b64encode(b"short").decode()):
        assert sealer.open(bad) is None
    assert CookieSealer(b"x" * 32).open(sealed) is None
    monkeypatch.setenv("CRHELPER_ROUTER_COOKIE_KEY", base64.b64encode(b"z" * 32).decode())
    assert load_key() == b"z" * 32
    monkeypatch.setenv("CRHELPER_ROUTER_COOKIE_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(ValueError, match="32 bytes"):
        load_key()


def test_events_count_zero_prints_no_past_events(repo: RouteRepository, capsys: pytest.CaptureFixture[str]) -> None:
    repo.create_app("z")
    repo.create_route("z", Route(type="tcp", service="s"))
    assert run(["router", "events", "--count", "0"]) == 0
    assert capsys.readouterr().out == ""
    assert run(["router", "events", "--count", "-1"]) == 2
    assert "--count" in capsys.readouterr().err


@pytest.mark.parametrize("addr", ["8080", "127.0.0.1", ":8080", "127.0.0.1:http", "127.0.0.1:70000"])
def test_services_register_refuses_a_bad_address(home: Path, capsys: pytest.CaptureFixture[str], addr: str) -> None:
    assert run(["router", "services", "register", "web", addr]) == 2
    assert "host:port" in capsys.readouterr().err
    assert ServiceRegistry().backends("web") == []
