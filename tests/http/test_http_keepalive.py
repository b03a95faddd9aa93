"""Delivery connections are kept open between answers to the same peer (a server or queue worker
answering many requests to one ROS endpoint pays one TCP and TLS handshake, not one per answer),
and a kept connection the peer has closed meanwhile never costs an answer nor sends one twice."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

from crhelper.config import DeliverySettings
from crhelper.outbound import deliver

SETTINGS = DeliverySettings(connect_timeout=1.0, read_timeout=2.0, max_attempts=3, backoff_base=0.01, backoff_cap=0.02)


class CountingPeer:
    """A ResponseURL on a raw socket: counts connections and requests; `mode` is how it ends each
    answer: "keep" (HTTP/1.1 keep-alive), "close-header" (`Connection: close`), "drop" (keeps
    nothing but says nothing, as a server whose idle timeout ran out between two answers), or
    "race" (keeps it, but closes it unread when the next request comes: its idle timeout ran out
    just as the request arrived, after the client found the connection open)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = 0
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/ros/answer?Signature=s"
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffered, served = b"", 0
            while True:
                if self.mode == "race" and served:
                    conn.recv(1)  # the next request has started coming: drop the connection, unread
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    return
                while b"\r\n\r\n" not in buffered:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffered += chunk
                head, _, rest = buffered.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:")))
                while len(rest) < length:
                    rest += conn.recv(65536)
                self.requests.append(rest[:length])
                buffered, served = rest[length:], served + 1
                extra = b"Connection: close\r\n" if self.mode == "close-header" else b""
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + extra + b"\r\nok")
                if self.mode not in ("keep", "race"):
                    conn.shutdown(socket.SHUT_RDWR)
                    return

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> Iterator[CountingPeer]:
    server = CountingPeer(request.param)
    yield server
    server.stop()


@pytest.mark.parametrize("peer", ["keep"], indirect=True)
def test_answers_to_one_peer_share_one_connection(peer: CountingPeer) -> None:
    reports = [deliver(f'{{"n": {n}}}'.encode(), peer.url, None, SETTINGS) for n in range(5)]
    assert [(r.delivered, r.attempts) for r in reports] == [(True, 1)] * 5
    assert peer.requests == [f'{{"n": {n}}}'.encode() for n in range(5)]
    assert peer.connections == 1


@pytest.mark.parametrize("peer", ["drop", "close-header", "race"], indirect=True)
def test_a_connection_the_peer_closed_is_not_reused_and_no_answer_is_lost_or_doubled(peer: CountingPeer) -> None:
    reports = [deliver(f'{{"n": {n}}}'.encode(), peer.url, None, SETTINGS) for n in range(4)]
    assert [(r.delivered, r.attempts) for r in reports] == [(True, 1)] * 4
    assert peer.requests == [f'{{"n": {n}}}'.encode() for n in range(4)]  # each once, in order
    assert peer.connections == 4
