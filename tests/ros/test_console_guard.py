"""The console's gate (crhelper/ros/console/guard.py): loopback Host names, the per-port cookie, the token."""

from __future__ import annotations

import pytest

from crhelper.ros.console import guard


@pytest.mark.parametrize("host", [
    "127.0.0.1", "127.0.0.1:8080", "127.1.2.3:80", "localhost", "localhost:9000", "LOCALHOST:9000",
    "[::1]", "[::1]:8080", "app.localhost:8080",
])
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert guard.is_loopback_host(host)


@pytest.mark.parametrize("host", [
    None, "", "evil.example:8080", "127.0.0.1.nip.io:8080", "localhost.evil.example", "10.0.0.1:8080",
    "0.0.0.0:8080", "[::2]:80", "127.0.0.1:80x", "192.168.1.2", "[::ffff:8.8.8.8]:80",
])
def test_other_hosts_are_refused_as_rebinding(host: str | None) -> None:
    assert not guard.is_loopback_host(host)


def test_split_host_reads_names_ports_and_ipv6() -> None:
    assert guard.split_host("127.0.0.1:8080") == ("127.0.0.1", "8080")
    assert guard.split_host("[::1]:81") == ("::1", "81")
    assert guard.split_host("[::1]") == ("::1", "")
    assert guard.split_host("localhost") == ("localhost", "")


def test_each_port_has_its_own_cookie() -> None:
    assert guard.cookie_name("127.0.0.1:8080") != guard.cookie_name("127.0.0.1:8081")
    assert guard.cookie_name("localhost:8080") == guard.cookie_name("127.0.0.1:8080")


def test_the_cookie_is_httponly_strict_and_read_back_for_its_port_only() -> None:
    value = guard.set_cookie("127.0.0.1:8080", "tok-123_x")
    assert "HttpOnly" in value and "SameSite=Strict" in value and "Path=/" in value
    pair = value.split(";")[0]
    assert guard.cookie_token({"Cookie": f"other=1; {pair}"}, "127.0.0.1:8080") == "tok-123_x"
    assert guard.cookie_token({"cookie": pair}, "127.0.0.1:8080") == "tok-123_x"
    assert guard.cookie_token({"Cookie": pair}, "127.0.0.1:9999") is None
    assert guard.cookie_token({}, "127.0.0.1:8080") is None
    assert guard.cookie_token({"Cookie": "\x00;;=bad"}, "127.0.0.1:8080") is None


def test_token_comparison_refuses_absent_empty_and_different_tokens() -> None:
    assert guard.token_matches("abc", "abc")
    assert not guard.token_matches("abd", "abc")
    assert not guard.token_matches("", "abc")
    assert not guard.token_matches(None, "abc")
    assert not guard.token_matches("", "")
    assert not guard.token_matches("\udcff", "abc")  # undecodable header bytes never match (nor raise)


def test_headers_are_found_whatever_their_case() -> None:
    assert guard.header({"X-Console-Token": "t"}, guard.TOKEN_HEADER) == "t"
    assert guard.header({"host": "h"}, "Host") == "h"
    assert guard.header({}, "Host") is None


def test_security_headers_allow_only_the_consoles_own_scripts() -> None:
    policy = guard.SECURITY_HEADERS["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
    assert guard.SECURITY_HEADERS["Cache-Control"] == "no-store"
