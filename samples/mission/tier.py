"""What the mission's three tiers share: a threaded HTTP server on the instance's address, its
router service registered before the stack's create can complete, and unregistered on SIGTERM.

Each tier runs as a `Custom::LocalInstance` (templates/mission.yaml): the local boot-group backend
gives it `CRHELPER_INSTANCE_ID`, `_HOST` and `_PORT`, and the template gives it `ROUTER_SERVICE`
(the service its route points at; empty for the database, which only the application reaches).
The registration goes through the routing provider's own registry (`handlers.routes.registry`,
the file `crhelper router services` edits), so the router sends traffic here as soon as the
socket listens. Standard library besides that."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SPAWNED = time.time()


def instance() -> tuple[str, str, int]:
    """(instance id, host, port) as the boot-group backend passes them."""
    return (os.environ.get("CRHELPER_INSTANCE_ID", "local"), os.environ.get("CRHELPER_INSTANCE_HOST", "127.0.0.1"),
            int(os.environ.get("CRHELPER_INSTANCE_PORT") or sys.argv[1]))


class TierHandler(BaseHTTPRequestHandler):
    """JSON helpers; every answer says which tier and instance produced it (`X-Mission-Tier`)."""

    tier = "?"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # one line per request on the instance's log
        print(f"{self.tier} {self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)

    def reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Mission-Tier", self.tier)
        self.send_header("X-Mission-Instance", instance()[0])
        self.end_headers()
        self.wfile.write(body)

    def reply_json(self, status: int, document: Any) -> None:
        self.reply(status, (json.dumps(document) + "\n").encode())

    def read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}


def serve(handler: type[TierHandler]) -> None:
    """Listen, register the router service, print when (the boot timeline's own clock), serve
    until SIGTERM, then unregister."""
    instance_id, host, port = instance()
    server = ThreadingHTTPServer((host, port), handler)  # bound and listening from here
    server.daemon_threads = True
    service = os.environ.get("ROUTER_SERVICE", "")
    address = f"{host}:{port}"
    if service:
        from handlers.routes import registry  # the router's registry; crhelper is installed with the stack

        registry.register(service, address)

    def stop(signum: int, frame: Any) -> None:
        if service:
            from handlers.routes import registry

            registry.unregister(service, address)
        print(json.dumps({"instance": instance_id, "stopped": time.time()}), flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(json.dumps({"instance": instance_id, "tier": handler.tier, "service": service, "address": address,
                      "spawned": SPAWNED, "listening": time.time()}), flush=True)
    server.serve_forever()
