"""Load test of `crhelper serve`: concurrent creates over loopback, every response counted.

    python bench/serve_load.py [--requests 2000] [--concurrency 32] [--workers 16] [--threads 32] [--mode async|sync]

Starts `crhelper serve samples/greeting.py:provider` in a subprocess on 127.0.0.1 (ephemeral port) and a
capturing ResponseURL server in this process, then sends `--requests` Create requests from
`--concurrency` client threads. A 500 (pool full, the status ROS retries after) is retried with exponential back-off (50 ms doubling to 1 s), as ROS retries an
idempotent Create. Async mode checks that every acknowledged request got exactly one response on its
ResponseURL (none lost, none duplicated, no protocol violation); sync mode checks every reply body and
that no callback was sent. Prints requests per second and exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crhelper.testing import ResponseServer, make_event  # noqa: E402

DEADLINE_SECONDS = 180.0


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "CRHELPER_LOG_LEVEL": "WARNING", "CRHELPER_HOME": args.home}
    command = [
        sys.executable, "-m", "crhelper.cli.serve", "samples/greeting.py:provider", "--host", "127.0.0.1",
        "--port", "0", "--threads", str(args.threads), "--workers", str(args.workers), "--backlog", str(args.backlog),
    ]
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        process.kill()
        raise SystemExit(f"crhelper serve did not start: {line!r}")
    # Keep draining stderr so warnings can never block the server on a full pipe.
    threading.Thread(target=lambda: process.stderr.read(), daemon=True).start()  # type: ignore[union-attr]
    return process, match.group(1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    local = threading.local()
    statuses: Counter[int] = Counter()
    sync_bodies: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    path = "/sync" if args.mode == "sync" else "/"

    with ResponseServer() as responses:
        process, base = start_server(args)
        url = base + path
        events = [
            responses.attach(make_event("Create", "Custom::Greeting", {"Name": f"n{i}", "Times": 2}, logical_resource_id=f"R{i}"))
            for i in range(args.requests)
        ]
        deadline = time.monotonic() + DEADLINE_SECONDS

        def send(event: dict[str, Any]) -> None:
            session = getattr(local, "session", None) or requests.Session()
            local.session = session
            payload = json.dumps(event)
            pause = 0.05
            while True:
                reply = session.post(url, data=payload, headers={"Content-Type": "application/json"}, timeout=30)
                with lock:
                    statuses[reply.status_code] += 1
                if reply.status_code not in (500, 503) or time.monotonic() > deadline:
                    break
                time.sleep(pause)  # back off like a polite retrying client, not a busy loop
                pause = min(pause * 2, 1.0)
            if args.mode == "sync" and reply.status_code == 200:
                with lock:
                    sync_bodies[event["RequestId"]] = reply.json()

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=args.concurrency) as clients:
            list(clients.map(send, events))
        acked = time.perf_counter()
        answered = acked
        if args.mode == "async":
            for event in events:
                responses.wait_for(event["RequestId"], timeout=max(1.0, deadline - time.monotonic()))
            answered = time.perf_counter()
        time.sleep(0.5)  # a late duplicate would arrive now
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(30)

        per_request = Counter(c.body.get("RequestId") for c in responses.captures if c.status == 200 and c.body)
        ids = [e["RequestId"] for e in events]
        if args.mode == "async":
            lost = [i for i in ids if per_request[i] == 0]
            duplicated = [i for i in ids if per_request[i] > 1]
        else:
            lost = [i for i in ids if sync_bodies.get(i, {}).get("Status") != "SUCCESS"]
            duplicated = [i for i in ids if per_request[i] > 0]  # sync must not call back at all
        return {
            "mode": args.mode,
            "requests": args.requests,
            "concurrency": args.concurrency,
            "server_threads": args.threads,
            "workers": args.workers,
            "http_statuses": dict(sorted(statuses.items())),
            "retried_overloaded": statuses.get(500, 0) + statuses.get(503, 0),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "violations": len(responses.violations),
            "server_exit_code": exit_code,
            "seconds_to_acknowledge_all": round(acked - started, 3),
            "seconds_to_answer_all": round(answered - started, 3),
            "acknowledged_per_second": round(args.requests / (acked - started), 1),
            "answered_per_second": round(args.requests / (answered - started), 1),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--threads", type=int, default=32, help="crhelper serve --threads")
    parser.add_argument("--workers", type=int, default=16, help="crhelper serve --workers")
    parser.add_argument("--backlog", type=int, default=256, help="crhelper serve --backlog")
    parser.add_argument("--mode", choices=("async", "sync"), default="async")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crhelper-serve-load-") as home:  # the server's state store
        args.home = home
        result = run(args)
    print(json.dumps(result, indent=2))
    print(
        f"{args.mode}: {args.requests} creates, {args.concurrency} clients: "
        f"{result['acknowledged_per_second']} req/s acknowledged, {result['answered_per_second']} req/s answered; "
        f"lost {result['lost']}, duplicated {result['duplicated']}, violations {result['violations']}",
        file=sys.stderr,
    )
    ok = not (result["lost"] or result["duplicated"] or result["violations"] or result["server_exit_code"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
