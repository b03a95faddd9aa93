"""Throughput and latency of the MNS queue worker, over loopback against LocalMNS.

    python bench/worker_bench.py [--requests 200] [--concurrency 8] [--handler-ms 50] [--store sqlite|none]

Enqueues `--requests` Create requests (raw JSON bodies) on a LocalMNS queue, runs one QueueWorker with
`--concurrency` handler threads, and waits until every request got exactly one response on the
capturing ResponseURL server and the queue is empty. Prints messages per second, the latency from
"enqueued" to "response received" (p50/p95/max) and the worker's counters; exits 1 if a response is
lost or duplicated or a message stays in the queue.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crhelper import Provider, Result  # noqa: E402
from crhelper.local.mns_server import LocalMNS  # noqa: E402
from crhelper.testing import ResponseServer, make_event  # noqa: E402
from crhelper.transports.mns_worker import QueueWorker  # noqa: E402

DEADLINE_SECONDS = 180.0


def build_provider(handler_seconds: float) -> Provider:
    provider = Provider()

    @provider.create("Custom::Bench")
    def create(props: dict, request: Any) -> Result:
        if handler_seconds:
            time.sleep(handler_seconds)
        return Result(physical_id=f"bench-{props['N']}")

    return provider


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> int:
    import warnings

    from mns.queue import Message, QueueMeta

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    with tempfile.TemporaryDirectory() as tmp, LocalMNS() as mns, ResponseServer() as responses:
        os.environ["CRHELPER_HOME"] = tmp
        os.environ["CRHELPER_STORE"] = "none" if args.store == "none" else f"sqlite:///{tmp}/state.sqlite"
        queue = mns.account().get_queue("bench")
        queue.set_encoding(False)
        queue.create(QueueMeta())
        provider = build_provider(args.handler_ms / 1000.0)
        events = [responses.attach(make_event("Create", "Custom::Bench", {"N": i})) for i in range(args.requests)]
        sent_at: dict[str, float] = {}
        for event in events:
            sent_at[event["RequestId"]] = time.monotonic()
            queue.send_message(Message(json.dumps(event)))
        enqueued = time.monotonic()
        worker = QueueWorker(provider, endpoint=mns.endpoint, queue="bench", access_key_id=mns.access_key_id,
                             access_key_secret=mns.access_key_secret, concurrency=args.concurrency, wait_seconds=1)
        started = time.monotonic()
        worker.start()
        received_at: dict[str, float] = {}
        deadline = started + DEADLINE_SECONDS
        while len(received_at) < len(events) and time.monotonic() < deadline:
            for event in events:
                rid = event["RequestId"]
                if rid not in received_at and responses.responses_for(rid):
                    received_at[rid] = time.monotonic()
            time.sleep(0.005)
        finished = time.monotonic()
        time.sleep(0.3)
        worker.stop(grace=5)
        provider.close()
        attrs = queue.get_attributes()
        left = attrs.active_messages + attrs.inactive_messages + attrs.delay_messages
        duplicated = sum(1 for e in events if len(responses.responses_for(e["RequestId"])) > 1)
        latencies = [received_at[r] - sent_at[r] for r in received_at]
        print(f"requests={args.requests} concurrency={args.concurrency} handler={args.handler_ms} ms store={args.store}")
        print(f"messages/s={len(received_at) / (finished - started):.1f} (enqueue took {enqueued - min(sent_at.values()):.2f} s)")
        if latencies:
            print(f"enqueue->response s: p50={statistics.median(latencies):.3f} p95={percentile(latencies, 0.95):.3f} "
                  f"max={max(latencies):.3f}")
        print(f"worker: {json.dumps(worker.stats())}")
        problems = []
        if len(received_at) != len(events):
            problems.append(f"{len(events) - len(received_at)} responses lost")
        if duplicated:
            problems.append(f"{duplicated} requests answered more than once")
        if left:
            problems.append(f"{left} messages left in the queue")
        if responses.violations:
            problems.append(f"{len(responses.violations)} protocol violations")
        for problem in problems:
            print(f"FAIL: {problem}")
        return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--handler-ms", type=float, default=50.0)
    parser.add_argument("--store", choices=("sqlite", "none"), default="sqlite")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
