"""Throughput of the MNS queue worker against a bare `aliyun-mns-sdk` consumer, over loopback against LocalMNS.

    python bench/worker_bench.py [--requests 400] [--concurrency 32] [--handler-ms 50] [--pairs 3]
                                 [--store sqlite|memory|none]

Each round enqueues `--requests` Create requests (raw JSON bodies) on a fresh LocalMNS queue and
drains it with one contender, timed from start until every request got its response on the
capturing ResponseURL server. Contenders run interleaved (bare, ours, bare, ours ...), `--pairs`
times, against the same endpoint and ResponseURL server:

* bare: `--concurrency` threads, each with its own SDK client, doing receive_message (long poll),
  the same sleep, one POST of the SUCCESS body (`http.client`) and delete_message. No store, no
  validation, no visibility extension: the floor of what consuming a queue costs here.
* ours: one `QueueWorker` with `--concurrency` handler threads running a `Provider` whose handler
  does the same sleep (idempotency store `--store`, as deployed; the SQLite store is opened by the
  bench from the same URL and handed to the provider, so that its group-commit counters are printed:
  writes, and the transactions that carried them).

The observer reads each new capture once (O(1) per response; the receive time is the server's own
stamp), so it costs the contenders nothing measurable. Every round checks that each request got
exactly one response, with no protocol violation, and that the queue is empty; exit 1 otherwise.
Target (issue 18): ours at least 0.8x the bare consumer's messages/s, median of the pairs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import Verdict, ratio  # noqa: E402

from crhelper import Provider, Result  # noqa: E402
from crhelper.local.mns_server import LocalMNS  # noqa: E402
from crhelper.store import open_store  # noqa: E402
from crhelper.testing import ResponseServer, make_event  # noqa: E402
from crhelper.transports.mns_worker import QueueWorker  # noqa: E402

DEADLINE_SECONDS = 180.0
TARGET_RATIO = 0.8


def build_provider(handler_seconds: float, store: Any = None) -> Provider:
    provider = Provider(store=store)

    @provider.create("Custom::Bench")
    def create(props: dict, request: Any) -> Result:
        if handler_seconds:
            time.sleep(handler_seconds)
        return Result(physical_id=f"bench-{props['N']}")

    return provider


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Observer:
    """Reads each capture of the ResponseURL server once: O(1) per response, whatever the backlog."""

    def __init__(self, responses: ResponseServer) -> None:
        self._responses = responses
        self._seen = 0
        self.first_at: dict[str, float] = {}  # RequestId -> wall time the server received its first answer
        self.answers: dict[str, int] = {}

    def poll(self) -> None:
        captures = self._responses.captures  # appended under the server's lock; read by index only
        while self._seen < len(captures):
            capture = captures[self._seen]
            self._seen += 1
            if capture.status == 200 and capture.body:
                rid = str(capture.body.get("RequestId"))
                self.answers[rid] = self.answers.get(rid, 0) + 1
                self.first_at.setdefault(rid, capture.received_at)


def bare_consumer(mns: LocalMNS, queue_name: str, threads: int, handler_seconds: float) -> Callable[[], None]:
    """Start the bare SDK consumer; returns its stop function."""
    from mns.account import Account
    from mns.mns_exception import MNSExceptionBase

    stop = threading.Event()

    def post(url: str, body: bytes, connections: dict[str, http.client.HTTPConnection]) -> None:
        parts = urlsplit(url)
        connection = connections.get(parts.netloc)
        if connection is None:
            connection = connections[parts.netloc] = http.client.HTTPConnection(parts.netloc, timeout=10)
        connection.request("POST", f"{parts.path}?{parts.query}", body=body,
                           headers={"Content-Type": "application/json", "Date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())})
        connection.getresponse().read()

    def consume() -> None:
        queue = Account(mns.endpoint, mns.access_key_id, mns.access_key_secret).get_queue(queue_name)
        queue.set_encoding(False)
        connections: dict[str, http.client.HTTPConnection] = {}
        while not stop.is_set():
            try:
                message = queue.receive_message(1)
            except MNSExceptionBase:
                continue
            request = json.loads(message.message_body)
            if handler_seconds:
                time.sleep(handler_seconds)
            answer = {"Status": "SUCCESS", "PhysicalResourceId": f"bench-{request['ResourceProperties']['N']}",
                      **{k: request[k] for k in ("StackId", "RequestId", "LogicalResourceId")}}
            post(request["ResponseURL"], json.dumps(answer).encode(), connections)
            queue.delete_message(message.receipt_handle)

    workers = [threading.Thread(target=consume, name=f"bare-{i}", daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()

    def halt() -> None:
        stop.set()
        for worker in workers:
            worker.join(5)

    return halt


def one_round(kind: str, args: argparse.Namespace, mns: LocalMNS, responses: ResponseServer, number: int) -> dict[str, Any]:
    from mns.queue import Message, QueueMeta

    name = f"bench-{kind}-{number}"
    queue = mns.account().get_queue(name)
    queue.set_encoding(False)
    queue.create(QueueMeta())
    events = [responses.attach(make_event("Create", "Custom::Bench", {"N": i})) for i in range(args.requests)]
    sent_at: dict[str, float] = {}
    bodies = [json.dumps(e) for e in events]
    for start in range(0, len(bodies), 16):
        chunk = bodies[start:start + 16]
        for event in events[start:start + 16]:
            sent_at[event["RequestId"]] = time.time()
        queue.batch_send_message([Message(body) for body in chunk])
    observer = Observer(responses)
    observer.poll()
    worker: QueueWorker | None = None
    provider: Provider | None = None
    store: Any = None
    started, cpu_started = time.time(), time.process_time()
    halt: Callable[[], None]
    if kind == "bare":
        halt = bare_consumer(mns, name, args.concurrency, args.handler_ms / 1000.0)
    else:
        if args.store == "sqlite":  # opened here, as the provider would, to read its group-commit counters
            store = open_store(os.environ["CRHELPER_STORE"])
        provider = build_provider(args.handler_ms / 1000.0, store)
        worker = QueueWorker(provider, endpoint=mns.endpoint, queue=name, access_key_id=mns.access_key_id,
                             access_key_secret=mns.access_key_secret, concurrency=args.concurrency, wait_seconds=1)
        worker.start()

        def halt() -> None:
            assert worker is not None
            worker.stop(grace=5)
    ids = {e["RequestId"] for e in events}
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        observer.poll()
        if ids <= observer.first_at.keys():
            break
        time.sleep(0.005)
    finished = max((observer.first_at.get(i, time.time()) for i in ids), default=time.time())
    cpu = time.process_time() - cpu_started  # the whole process: consumer, LocalMNS, ResponseURL server
    time.sleep(0.3)  # a late duplicate would arrive now
    halt()
    observer.poll()
    if provider is not None:
        provider.close()
    commits = None
    if store is not None:
        commits = {"writes": store.writes, "commits": store.commits}
        store.close()
    attrs = queue.get_attributes()
    left = attrs.active_messages + attrs.inactive_messages + attrs.delay_messages
    answered = [i for i in ids if i in observer.first_at]
    latencies = [observer.first_at[i] - sent_at[i] for i in answered]
    problems = []
    if len(answered) != len(ids):
        problems.append(f"{len(ids) - len(answered)} responses lost")
    duplicated = sum(1 for i in ids if observer.answers.get(i, 0) > 1)
    if duplicated:
        problems.append(f"{duplicated} requests answered more than once")
    if left:
        problems.append(f"{left} messages left in the queue")
    return {
        "kind": kind,
        "per_second": len(answered) / max(1e-9, finished - started),
        "p50": statistics.median(latencies) if latencies else float("nan"),
        "p95": percentile(latencies, 0.95) if latencies else float("nan"),
        "stats": worker.stats() if worker is not None else None,
        "store": commits,
        "problems": problems,
        "cpu_ms": cpu * 1000 / max(1, len(answered)),
    }


def run(args: argparse.Namespace) -> int:
    import warnings

    warnings.filterwarnings("ignore", category=DeprecationWarning)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, LocalMNS() as mns, ResponseServer() as responses:
        os.environ["CRHELPER_HOME"] = tmp
        os.environ["CRHELPER_STORE"] = {"none": "none", "memory": "memory://"}.get(args.store, f"sqlite:///{tmp}/state.sqlite")
        os.environ.setdefault("CRHELPER_LOG_LEVEL", "WARNING")
        print(f"requests={args.requests} concurrency={args.concurrency} handler={args.handler_ms:g} ms "
              f"store={args.store} pairs={args.pairs} cpus={os.cpu_count()}")
        for pair in range(1, args.pairs + 1):
            for kind in ("bare", "ours"):
                result = one_round(kind, args, mns, responses, pair)
                rounds.append(result)
                line = (f"pair {pair} {kind:4s}: {result['per_second']:6.1f} messages/s, enqueue->response "
                        f"p50 {result['p50']:.3f} s p95 {result['p95']:.3f} s, process CPU {result['cpu_ms']:.2f} ms/message")
                if result["stats"] is not None:
                    line += f"; worker {json.dumps(result['stats'])}"
                if result["store"]:
                    line += (f"; store {result['store']['writes']} writes in {result['store']['commits']} "
                             f"commits ({result['store']['writes'] / max(1, result['store']['commits']):.1f} per commit)")
                print(line, flush=True)
                for problem in result["problems"]:
                    print(f"FAIL: pair {pair} {kind}: {problem}")
        violations = list(responses.violations)
    pairs = [(b["per_second"], o["per_second"]) for b, o in zip(rounds[::2], rounds[1::2])]
    ratios = [ratio(ours, bare) for bare, ours in pairs]
    verdict = Verdict("ours / bare aliyun-mns-sdk consumer, messages/s (median of pairs)", statistics.median(ratios),
                      TARGET_RATIO, higher_is_better=True,
                      note=f"min {min(ratios):.2f} max {max(ratios):.2f}; ideal {args.concurrency * 1000 / args.handler_ms:.0f}/s"
                      if args.handler_ms else "")
    print(f"bare median {statistics.median([b for b, _ in pairs]):.1f}/s, ours median {statistics.median([o for _, o in pairs]):.1f}/s")
    cpu_bare = statistics.median(r["cpu_ms"] for r in rounds[::2])
    cpu_ours = statistics.median(r["cpu_ms"] for r in rounds[1::2])
    print(f"process CPU per message (medians; the steadier reading when other work shares the cores): "
          f"bare {cpu_bare:.2f} ms, ours {cpu_ours:.2f} ms, bare/ours {cpu_bare / max(cpu_ours, 1e-9):.2f}")
    print(verdict.line())
    if violations:
        print(f"FAIL: {len(violations)} protocol violations, first: {violations[0]}")
    failed = violations or any(r["problems"] for r in rounds)
    return 1 if failed or not verdict.passed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--handler-ms", type=float, default=50.0)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--store", choices=("sqlite", "memory", "none"), default="sqlite",
                        help="the worker's idempotency store (memory://: one process's own, to split the store's cost)")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
