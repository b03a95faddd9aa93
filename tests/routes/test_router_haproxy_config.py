"""The HAProxy engine's pure half: routes and backends to maps, backend slots, server commands and
the configuration (no HAProxy needed; the engine tests load what this renders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from handlers.routes import engine_haproxy_config as C
from handlers.routes.matching import NOT_FOUND_BODY, Backend
from handlers.routes.model import Route


def http(domain: str, path: str = "/", service: str = "web", **kw: Any) -> Route:
    return Route(type="http", domain=domain, path=path, service=service, id=f"{domain}{path}", **kw)


SERVICES = {"web": [(Backend("127.0.0.1:9001"), ("127.0.0.1", 9001)), (Backend("b:9002"), ("10.0.0.2", 9002))],
            "db": [(Backend("127.0.0.1:5432", leader=True), ("127.0.0.1", 5432))]}


def test_maps_hold_rooted_domains_and_their_paths() -> None:
    routes = [http("Shop.Example.com"), http("shop.example.com", "/api/"), http("*.example.com"), http("*"),
              http("orphan.example.com", "/x/"), http("http://bad.example.com")]
    desired = C.plan(routes, SERVICES, C.SlotAllocator())
    assert desired.hosts == {"shop.example.com": "shop.example.com", "*": "*"}
    assert desired.wildcards == {"example.com": "*.example.com"}  # looked up by suffix
    assert set(desired.paths) == {"shop.example.com/", "shop.example.com/api/", "*.example.com/", "*/"}
    assert len(set(desired.paths.values())) == 4  # one backend slot per route
    assert desired.servers[desired.paths["*/"]] == [("127.0.0.1", 9001), ("10.0.0.2", 9002)]


def test_slots_are_stable_and_follow_the_route_kind() -> None:
    slots = C.SlotAllocator(per_kind=2)
    plain = C.plan([http("a.com"), http("b.com")], SERVICES, slots)
    again = C.plan([http("b.com"), http("a.com", service="db")], SERVICES, slots)
    assert again.paths == plain.paths and again.shape() == plain.shape()  # a service change: servers only
    sticky = C.plan([http("a.com", sticky=True), http("b.com", disable_keep_alives=True)], SERVICES, slots)
    assert sticky.paths == {"a.com/": "rs0", "b.com/": "rc0"}
    grown = C.plan([http(f"{n}.com", sticky=True) for n in "abc"], SERVICES, slots)
    assert grown.per_kind == 4 and grown.shape() != sticky.shape()  # more slots: a reload


def test_leader_routes_and_tcp_ports() -> None:
    routes = [Route(type="tcp", service="db", port=3001, id="t1"), Route(type="tcp", service="web", port=3002, id="t2",
                                                                         leader=True)]
    desired = C.plan(routes, SERVICES, C.SlotAllocator(), tcp_ports=[3001])
    assert desired.tcp_ports == (3001,) and desired.servers == {"t3001": [("127.0.0.1", 5432)]}
    both = C.plan(routes, SERVICES, C.SlotAllocator())
    assert both.servers["t3002"] == [("127.0.0.1", 9001)]  # no flagged leader: the first entry


def test_addresses_keep_their_server_slot_and_commands_touch_only_changes() -> None:
    a, b, c = ("10.0.0.1", 1), ("10.0.0.2", 2), ("10.0.0.3", 3)
    assert C.place([a, b], [b, c]) == [c, b]
    assert C.place([a, None, b], [b]) == [None, None, b]
    assert C.place([], []) == []
    assert C.server_commands("rp0", [a, b], [c, b], 4) == [
        "set server rp0/s0 state maint", "set server rp0/s0 addr 10.0.0.3 port 3", "set server rp0/s0 state ready"]
    assert C.server_commands("rp0", [a], [], 4) == ["set server rp0/s0 state maint"]
    assert C.server_commands("rp0", [a], [a], 4) == []


def test_server_slots_grow_past_the_declared_count() -> None:
    many = [(Backend(f"10.0.0.{i}:80"), (f"10.0.0.{i}", 80)) for i in range(9)]
    desired = C.plan([http("a.com")], {"web": many}, C.SlotAllocator(), per_backend=4)
    assert desired.per_backend == 16 and len(desired.servers["rp0"]) == 9


def test_the_configuration_matches_as_flynn_does_and_keeps_secrets_out() -> None:
    key = C.dynamic_cookie_key(b"k" * 32)
    desired = C.plan([http("s.com", sticky=True)], SERVICES, C.SlotAllocator(per_kind=1))
    text = C.render(desired, C.Listen("/run/x", "127.0.0.1", 8080, 4433, "127.0.0.1", key))
    assert "map_str(/run/x/hosts.map)" in text and "map_str(/run/x/wild.map)" in text and "map_beg(/run/x/paths.map,no_route)" in text
    assert text.count(",.,0)") == 4  # *.host, then 1..4 leading labels cut: Go's SplitN(host, ".", 5)
    assert "cookie _backend insert indirect nocache dynamic" in text and key in text and "k" * 32 not in text
    assert "ssl crt-list" not in text  # no certificate: no HTTPS listener
    assert "errorfile 404 /run/x/404.http" in text and "balance random(2)" in text and "retries 3" in text
    # backend connections kept and shared; no per-request log line (no ``log global`` for the proxies)
    assert "    option http-keep-alive\n    http-reuse always\n" in text and "log global" not in text
    assert C.error_response(404, "Not Found", NOT_FOUND_BODY).endswith("\r\n\r\nNot Found\n")
    assert C.map_text({"b": "2", "a": "1"}) == "a 1\nb 2\n"


def test_a_missing_haproxy_is_refused_with_what_to_install(tmp_path: Path) -> None:
    from handlers.routes.engine_haproxy import HAProxyError, find_haproxy

    with pytest.raises(HAProxyError, match=r"not found on PATH: install HAProxy 2\.5 or later"):
        find_haproxy(str(tmp_path / "no-haproxy"))


@pytest.mark.slow  # runs a stand-in executable
def test_an_old_haproxy_is_refused(tmp_path: Path) -> None:
    from handlers.routes.engine_haproxy import HAProxyError, find_haproxy

    old = tmp_path / "haproxy"
    old.write_text("#!/bin/sh\necho 'HAProxy version 2.2.9-2 2021/01/01'\n")
    old.chmod(0o755)
    with pytest.raises(HAProxyError, match=r"2\.5 or later is needed, found version 2\.2"):
        find_haproxy(str(old))


@pytest.mark.slow  # the first import of the router's command bodies (aiohttp) takes ~1 s
def test_without_haproxy_the_command_says_what_to_install(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crhelper.cli.main import main

    assert main(["router", "serve", "--engine", "haproxy", "--haproxy", str(home / "no-haproxy"), "--port", "0",
                 "--no-https"]) == 1
    err = capsys.readouterr().err
    assert "not found on PATH: install HAProxy 2.5 or later (Debian/Ubuntu: apt-get install haproxy)" in err
    assert "Traceback" not in err
