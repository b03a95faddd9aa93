"""Load test of `crhelper serve`: concurrent creates over loopback, every response counted.

    python bench/serve_load.py [--requests 2000] [--clients 8,32,64] [--rounds 2] [--workers 16] [--threads 32]
                               [--mode async|sync] [--retry]

For each client count (interleaved, `--rounds` times) starts `crhelper serve samples/greeting.py:provider`
in a subprocess on 127.0.0.1 (ephemeral port) with a capturing ResponseURL server in this process, then
sends `--requests` Create requests from that many client threads. A client does not retry a refusal:
a plain `web:` Create is never retried by ROS (only `web[idempotent]` ones are; `--retry` retries
500/503 with back-off, as ROS does for those). Async mode checks that every acknowledged request got
exactly one response on its ResponseURL, that every refused one was answered FAILED there (none lost,
none duplicated, no protocol violation); sync mode checks every reply body and that no callback was
sent. Targets (issue 18, async): no refused Create up to 64 clients, 0 lost, and answered requests/s at
32 clients at least the 8-client figure. Exits 1 if a check or a target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import Verdict  # noqa: E402

from crhelper.testing import ResponseServer, make_event  # noqa: E402

DEADLINE_SECONDS = 180.0


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "CRHELPER_LOG_LEVEL": "WARNING", "CRHELPER_HOME": args.home}
    command = [
        sys.executable, "-m", "crhelper.cli.serve", "samples/greeting.py:provider", "--host", "127.0.0.1",
        "--port", "0", "--threads", str(args.threads), "--workers", str(args.workers),
        *(["--backlog", str(args.backlog)] if args.backlog is not None else []),
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


def run(args: argparse.Namespace, clients: int) -> dict[str, Any]:
    local = threading.local()
    statuses: Counter[int] = Counter()
    refused: set[str] = set()
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
                if not args.retry or reply.status_code not in (500, 503) or time.monotonic() > deadline:
                    break
                time.sleep(pause)  # back off like a polite retrying client, not a busy loop
                pause = min(pause * 2, 1.0)
            if reply.status_code >= 300:
                with lock:
                    refused.add(event["RequestId"])
            if args.mode == "sync" and reply.status_code == 200:
                with lock:
                    sync_bodies[event["RequestId"]] = reply.json()

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            list(pool.map(send, events))
        acked = time.perf_counter()
        answered = acked
        if args.mode == "async":
            for event in events:
                try:
                    responses.wait_for(event["RequestId"], timeout=max(1.0, deadline - time.monotonic()))
                except TimeoutError:
                    break  # counted as lost below
            answered = time.perf_counter()
        time.sleep(0.5)  # a late duplicate would arrive now
        server_cpu = _cpu_seconds(process.pid)
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(30)

        per_request = Counter(c.body.get("RequestId") for c in responses.captures if c.status == 200 and c.body)
        status_of = {c.body.get("RequestId"): c.body.get("Status") for c in responses.captures if c.status == 200 and c.body}
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
            "clients": clients,
            "server_threads": args.threads,
            "workers": args.workers,
            "http_statuses": dict(sorted(statuses.items())),
            "refused": len(refused),
            "refused_answered_failed": sum(1 for i in refused if status_of.get(i) == "FAILED"),
            "answered_failed": sum(1 for i in ids if status_of.get(i) == "FAILED"),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "violations": len(responses.violations),
            "server_exit_code": exit_code,
            "seconds_to_acknowledge_all": round(acked - started, 3),
            "seconds_to_answer_all": round(answered - started, 3),
            "acknowledged_per_second": round(args.requests / (acked - started), 1),
            "answered_per_second": round(args.requests / (answered - started), 1),
            "server_cpu_seconds": server_cpu,
        }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from /proc (Linux); NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, IndexError, ValueError):
        return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", default="8,32,64", help="comma-separated client counts (default 8,32,64)")
    parser.add_argument("--rounds", type=int, default=2, help="times each client count runs, interleaved (default 2)")
    parser.add_argument("--threads", type=int, default=32, help="crhelper serve --threads")
    parser.add_argument("--workers", type=int, default=16, help="crhelper serve --workers")
    parser.add_argument("--backlog", type=int, default=None, help="crhelper serve --backlog (default: the server's)")
    parser.add_argument("--mode", choices=("async", "sync"), default="async")
    parser.add_argument("--retry", action="store_true", help="retry 500/503 with back-off (a web[idempotent] client)")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    results: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
    ok = True
    for round_number in range(1, args.rounds + 1):
        for clients in counts:
            with tempfile.TemporaryDirectory(prefix="crhelper-serve-load-") as home:  # the server's state store
                args.home = home
                result = run(args, clients)
            results[clients].append(result)
            ok = ok and not (result["lost"] or result["duplicated"] or result["violations"] or result["server_exit_code"])
            print(
                f"round {round_number} {args.mode}: {args.requests} creates, {clients:3d} clients: "
                f"{result['acknowledged_per_second']:7.1f} req/s acknowledged, {result['answered_per_second']:6.1f} req/s answered; "
                f"refused {result['refused']} (answered FAILED {result['refused_answered_failed']}), "
                f"FAILED answers {result['answered_failed']}, lost {result['lost']}, duplicated {result['duplicated']}, "
                f"violations {result['violations']}; server cpu {result['server_cpu_seconds']} s; "
                f"statuses {result['http_statuses']}",
                flush=True,
            )
    answered = {c: statistics.median(r["answered_per_second"] for r in results[c]) for c in counts}
    verdicts = []
    if args.mode == "async":
        worst_refused = max((r["refused"] for c in counts if c <= 64 for r in results[c]), default=0)
        verdicts.append(Verdict("refused Creates, any run up to 64 clients", worst_refused, 0, higher_is_better=False))
        verdicts.append(Verdict("lost answers, all runs", sum(r["lost"] for c in counts for r in results[c]), 0,
                                higher_is_better=False))
        if 8 in answered and 32 in answered:
            verdicts.append(Verdict("answered req/s at 32 clients / at 8 clients (medians)", answered[32] / answered[8], 1.0,
                                    higher_is_better=True, note=f"{answered[32]:.1f} vs {answered[8]:.1f} req/s"))
    print("medians answered req/s: " + ", ".join(f"{c} clients {answered[c]:.1f}" for c in counts))
    for verdict in verdicts:
        print(verdict.line())
    return 0 if ok and all(v.passed for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
