"""Kept-alive response connections, over real sockets: the next answer to the same peer reuses the
connection the peer kept open, and never one it closed, one idle too long, one a forked parent holds,
or one whose reply was not read to its end."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from typing import Callable, Iterator

import pytest
import trustme

from crhelper.config import ConfigError, DeliverySettings, Settings
from crhelper.outbound import close_idle_connections, deliver
from tcp_peers import TcpPeer

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
OK_CLOSE = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
#: HTTP/1.0 without a length: the body ends when the connection does.
OK_UNTIL_CLOSE = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}"
#: `step(connection number, request number on that connection)` -> what the peer does with that request.
Step = Callable[[int, int], str]


class ScriptedPeer(TcpPeer):
    """An HTTP/1.1 server on 127.0.0.1 that counts connections and the requests each carried, and does
    with each request what `step` says: "ok" (reply, keep the connection), "close" (reply with
    `Connection: close`), "until-close" (HTTP/1.0 reply ended by closing), "ok-then-vanish" (reply,
    then close without saying so), "drop" (read the request, close without a byte), "big" (a 70 KiB body),
    "trickle" (the reply one byte every 0.2 s)."""

    def __init__(self, step: Step, tls: ssl.SSLContext | None = None) -> None:
        self.step = step
        self._tls = tls
        self.scheme = "https" if tls is not None else "http"
        #: (connection number, request number on it, body) of every request read whole.
        self.requests: list[tuple[int, int, bytes]] = []
        super().__init__()

    def __enter__(self) -> "ScriptedPeer":
        super().__enter__()
        return self

    def serve(self, conn: socket.socket, number: int) -> None:
        buffered = b""
        try:
            if self._tls is not None:
                conn.settimeout(2.0)
                conn = self._tls.wrap_socket(conn, server_side=True)
            conn.settimeout(0.1)
            for index in range(1, 1000):
                request, buffered = self._read_request(conn, buffered)
                if request is None:
                    return
                self.requests.append((number, index, request))
                action = self.step(number, index)
                if action == "drop":
                    return
                if action == "trickle":
                    for byte in OK:
                        if self._stop.wait(0.2):
                            return
                        conn.sendall(bytes([byte]))
                    continue
                reply = {"ok": OK, "ok-then-vanish": OK, "close": OK_CLOSE, "until-close": OK_UNTIL_CLOSE,
                         "big": b"HTTP/1.1 200 OK\r\nContent-Length: 71680\r\n\r\n" + b"x" * 71680}[action]
                conn.sendall(reply)
                if action in ("close", "until-close", "ok-then-vanish"):
                    return
        except OSError:
            pass
        finally:
            conn.close()

    def _read_request(self, conn: socket.socket, data: bytes) -> tuple[bytes | None, bytes]:
        """(body, bytes already read of the next request), or (None, b"") when the client closed."""
        while b"\r\n\r\n" not in data:
            chunk = self._recv(conn)
            if not chunk:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            chunk = self._recv(conn)
            if not chunk:
                return None, b""
            rest += chunk
        return rest[:length], rest[length:]

    def _recv(self, conn: socket.socket) -> bytes:
        while not self._stop.is_set():
            try:
                return conn.recv(65536)
            except socket.timeout:
                continue
        return b""


def settings(**overrides: float) -> DeliverySettings:
    values = dict(connect_timeout=0.5, read_timeout=2.0, max_attempts=1, backoff_base=0.01, backoff_cap=0.02)
    values.update(overrides)
    return DeliverySettings(**values)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_kept_connections() -> Iterator[None]:
    """Each test starts, and leaves, with no kept connection (a peer of another test could be reused)."""
    close_idle_connections()
    yield
    close_idle_connections()


def answer(url: str, n: int, **overrides: float) -> list[bool]:
    return [deliver(f'{{"n": {i}}}'.encode(), url, None, settings(**overrides)).delivered for i in range(n)]


def test_five_answers_to_one_peer_go_on_one_connection_each_read_whole() -> None:
    with ScriptedPeer(lambda c, r: "ok") as server:
        assert answer(server.url, 5) == [True] * 5
        assert server.connections == 1
        assert [(c, r, body) for c, r, body in server.requests] == [(1, i + 1, f'{{"n": {i}}}'.encode()) for i in range(5)]


@pytest.mark.parametrize("action", ["close", "until-close", "big"])
def test_a_connection_the_peer_closes_or_whose_reply_is_not_read_whole_is_not_kept(action: str) -> None:
    with ScriptedPeer(lambda c, r: action) as server:
        assert answer(server.url, 3) == [True] * 3
        assert server.connections == 3
        assert [(c, r) for c, r, _ in server.requests] == [(1, 1), (2, 1), (3, 1)]


def test_a_connection_the_peer_closed_while_idle_is_not_used_and_the_answer_goes_in_one_attempt() -> None:
    with ScriptedPeer(lambda c, r: "ok-then-vanish") as server:
        first = deliver(b'{"n": 0}', server.url, None, settings())
        time.sleep(0.2)  # the peer's FIN is in
        second = deliver(b'{"n": 1}', server.url, None, settings())
        assert (first.delivered, second.delivered, second.attempts) == (True, True, 1)
        assert [(c, r, body) for c, r, body in server.requests] == [(1, 1, b'{"n": 0}'), (2, 1, b'{"n": 1}')]


def test_a_kept_connection_the_peer_drops_on_the_next_request_is_replaced_within_the_same_attempt() -> None:
    """The race of keep-alive: the peer closes the idle connection as the next request goes out. Nothing
    of a reply was read, so the answer goes again on a new connection, still one attempt."""
    with ScriptedPeer(lambda c, r: "drop" if (c, r) == (1, 2) else "ok") as server:
        assert deliver(b'{"n": 0}', server.url, None, settings()).delivered
        report = deliver(b'{"n": 1}', server.url, None, settings())
        assert (report.delivered, report.attempts) == (True, 1)
        assert [(c, r, body) for c, r, body in server.requests] == [
            (1, 1, b'{"n": 0}'), (1, 2, b'{"n": 1}'), (2, 1, b'{"n": 1}')]


def test_a_new_connection_the_peer_drops_is_a_failed_attempt_not_a_silent_resend() -> None:
    with ScriptedPeer(lambda c, r: "drop") as server:
        report = deliver(b"{}", server.url, None, settings())
        assert not report.delivered and report.attempts == 1
        assert "RemoteDisconnected" in (report.error or "")
        assert len(server.requests) == 1


def test_a_trickling_reply_on_a_kept_connection_is_bounded_by_the_attempt_budget() -> None:
    with ScriptedPeer(lambda c, r: "trickle" if r == 2 else "ok") as server:
        assert deliver(b"{}", server.url, None, settings()).delivered
        started = time.monotonic()
        report = deliver(b"{}", server.url, None, settings(read_timeout=0.5, connect_timeout=0.2))
        elapsed = time.monotonic() - started
        assert not report.delivered and server.connections == 1
        assert elapsed < 0.7 + 0.6  # the attempt's budget (connect + read) and thread scheduling
        assert "budget" in (report.error or "")
        # The cut connection is not kept: the next answer opens a new one.
        assert deliver(b"{}", server.url, None, settings()).delivered and server.connections == 2


def test_keep_alive_zero_opens_a_new_connection_per_answer_and_a_short_one_lapses() -> None:
    with ScriptedPeer(lambda c, r: "ok") as server:
        assert answer(server.url, 3, keep_alive=0.0) == [True] * 3
        assert server.connections == 3
    with ScriptedPeer(lambda c, r: "ok") as server:
        assert answer(server.url, 2, keep_alive=0.3) == [True] * 2
        time.sleep(0.4)
        assert answer(server.url, 1, keep_alive=0.3) == [True]
        assert server.connections == 2


def test_https_answers_share_one_verified_connection_and_a_peer_closing_it_is_noticed(tmp_path) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    with ScriptedPeer(lambda c, r: "ok-then-vanish" if r == 3 else "ok", tls=server_context) as server:
        trusted = DeliverySettings(connect_timeout=2.0, read_timeout=2.0, max_attempts=1, ca_bundle=str(bundle))
        for i in range(3):
            assert deliver(b"{}", server.url, None, trusted).delivered, i
        assert server.connections == 1  # one handshake for three answers
        time.sleep(0.2)  # the peer closed it after the third
        report = deliver(b"{}", server.url, None, trusted)
        assert (report.delivered, report.attempts, server.connections) == (True, 1, 2)


def test_connections_are_kept_per_peer_and_per_trust_setting() -> None:
    with ScriptedPeer(lambda c, r: "ok") as one, ScriptedPeer(lambda c, r: "ok") as two:
        for _ in range(2):
            assert answer(one.url, 1) == [True] and answer(two.url, 1) == [True]
        assert (one.connections, two.connections) == (1, 1)
        assert answer(one.url, 1, verify_tls=False) == [True]  # another trust: not the verified connection
        assert one.connections == 2


def test_concurrent_answers_each_take_their_own_connection_and_keep_it_for_the_next() -> None:
    with ScriptedPeer(lambda c, r: "ok") as server:
        barrier = threading.Barrier(8)
        results: list[bool] = []

        def run() -> None:
            barrier.wait()
            results.extend(answer(server.url, 5))

        threads = [threading.Thread(target=run) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert results == [True] * 40
        assert len(server.requests) == 40
        assert server.connections <= 8  # never one per answer; never a connection shared by two at once
        per_connection: dict[int, list[int]] = {}
        for c, r, _ in server.requests:
            per_connection.setdefault(c, []).append(r)
        assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in per_connection.values())


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_never_uses_the_connection_its_parent_kept() -> None:
    with ScriptedPeer(lambda c, r: "ok") as server:
        assert answer(server.url, 1) == [True]
        pid = os.fork()
        if pid == 0:  # the child: a new connection of its own, the parent's left alone
            try:
                os._exit(0 if answer(server.url, 1) == [True] else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert answer(server.url, 1) == [True]  # the parent's connection still works
        assert server.connections == 2
        assert sorted((c, r) for c, r, _ in server.requests) == [(1, 1), (1, 2), (2, 1)]


def test_the_keep_alive_setting_is_read_from_the_environment_and_checked() -> None:
    assert Settings.from_env({}).delivery.keep_alive == 15.0
    assert Settings.from_env({"CRHELPER_RESPONSE_KEEPALIVE": "0"}).delivery.keep_alive == 0.0
    with pytest.raises(ConfigError, match="^CRHELPER_RESPONSE_KEEPALIVE: must be at least 0.0, got -1.0$"):
        Settings.from_env({"CRHELPER_RESPONSE_KEEPALIVE": "-1"})
    with pytest.raises(ConfigError, match="^CRHELPER_RESPONSE_KEEPALIVE: expected a number of seconds, got 'often'$"):
        Settings.from_env({"CRHELPER_RESPONSE_KEEPALIVE": "often"})
