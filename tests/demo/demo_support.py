"""What both mission demos share: the processes a stack left, its routes from outside, each
command's time, and independent commands run at once."""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, TypeVar

T = TypeVar("T")


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


def timed(run: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """`run` (crhelper_json) that prints each command's seconds on stderr (`pytest -s` shows where a
    demo's time goes) and, with $DEMO_TRACE naming a folder, keeps each answer there (its events
    carry their timestamps)."""
    def step(*args: str, **kw: Any) -> dict[str, Any]:
        started = time.monotonic()
        document = run(*args, **kw)
        print(f"[demo] {time.monotonic() - started:7.2f} s  crhelper {' '.join(args[:4])}", file=sys.stderr, flush=True)
        if os.environ.get("DEMO_TRACE"):
            folder = Path(os.environ["DEMO_TRACE"])
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{time.time():.3f}-{'-'.join(args[:2])}.json").write_text(json.dumps(document, indent=1))
        return document
    return step


def at_once(*calls: Callable[[], T]) -> list[T]:
    """Run independent commands (e.g. two stacks' creates) in parallel: their answers in order; the
    first failure is raised once all have ended."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]
