"""A real TCP server on 127.0.0.1 for delivery tests: it accepts in a thread, counts connections, and
serves each in a thread of its own with `serve(conn, number)`, which subclasses define."""

from __future__ import annotations

import socket
import threading
from typing import Callable


class TcpPeer:
    """`with Peer(...) as peer:` ... `peer.url`; every thread ends within a few seconds of the exit."""

    scheme = "http"

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self.port = self._listener.getsockname()[1]
        self.url = f"{self.scheme}://127.0.0.1:{self.port}/ros/public/x?Signature=SECRET"

    def __enter__(self) -> "TcpPeer":
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()

    def serve(self, conn: socket.socket, number: int) -> None:
        raise NotImplementedError

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            self._spawn(self.serve, conn, self.connections)
