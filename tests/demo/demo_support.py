"""What both mission demos look at: the processes a stack left, and its routes from outside."""

from __future__ import annotations

import http.client
import os
from pathlib import Path


def processes_with(marker: str) -> dict[int, str]:
    """pid -> command line of every process whose environment holds `marker` (NAME=value): a /proc
    scan, no psutil."""
    found: dict[int, str] = {}
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def get(address: str, domain: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET `path` from the router at `address` (host:port) for `domain`: status, headers, body."""
    host, _, port = address.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request("GET", path, headers={"Host": domain})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()
