"""Router throughput and added latency versus hitting the backend directly (loopback, bounded).

The backend (a minimal aiohttp app) and the router (``handlers.routes.proxy.Router``) each run in
their own process; an aiohttp client with N concurrent connections sends a fixed number of GETs,
first straight to the backend, then through the router, for several rounds. Prints the median
requests/s and median/p99 latency of each, and the proxy/direct ratios.

    python bench/router_bench.py --requests 3000 --concurrency 16 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {timeout} s")


def run_backend(port: int) -> None:
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello from the backend\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", hello)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def run_router(home: str, port: int) -> None:
    os.environ["CRHELPER_HOME"] = home
    from handlers.routes.proxy import Router, serve_forever
    from handlers.routes.registry import ServiceRegistry
    from handlers.routes.repository import RouteRepository
    from handlers.routes.sticky import CookieSealer

    router = Router(RouteRepository(), ServiceRegistry(), CookieSealer(b"b" * 32), http_port=port)
    asyncio.run(serve_forever(router))


async def load(url: str, host: str, total: int, concurrency: int) -> tuple[float, list[float]]:
    """(requests/s, per-request latencies in ms) for ``total`` GETs over ``concurrency`` connections."""
    from aiohttp import ClientSession, TCPConnector

    latencies: list[float] = []
    remaining = concurrency  # warm-up: one request per connection

    async def worker(session: ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            start = time.perf_counter()
            async with session.get(url, headers={"Host": host}) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"unexpected status {resp.status}")
            latencies.append((time.perf_counter() - start) * 1000)

    async with ClientSession(connector=TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        remaining = total
        latencies.clear()
        began = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return total / elapsed, latencies


def p99(values: list[float]) -> float:
    return sorted(values)[int(len(values) * 0.99) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not 0 < args.requests <= 100_000 or not 0 < args.concurrency <= 256 or not 0 < args.rounds <= 10:
        parser.error("bounds: requests 1-100000, concurrency 1-256, rounds 1-10")

    home = tempfile.mkdtemp(prefix="router-bench-")
    os.environ["CRHELPER_HOME"] = home
    from handlers.routes.model import Route
    from handlers.routes.registry import register
    from handlers.routes.repository import RouteRepository

    backend_port, router_port = free_port(), free_port()
    repo = RouteRepository()
    repo.create_app("bench")
    repo.create_route("bench", Route(type="http", service="bench-web", domain="bench.local"))
    register("bench-web", f"127.0.0.1:{backend_port}")

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=run_backend, args=(backend_port,), daemon=True),
             ctx.Process(target=run_router, args=(home, router_port), daemon=True)]
    for proc in procs:
        proc.start()
    try:
        wait_port(backend_port)
        wait_port(router_port)
        direct_url = f"http://127.0.0.1:{backend_port}/"
        proxy_url = f"http://127.0.0.1:{router_port}/"
        results: dict[str, list[tuple[float, list[float]]]] = {"direct": [], "proxy": []}
        for _ in range(args.rounds):
            results["direct"].append(asyncio.run(load(direct_url, "bench.local", args.requests, args.concurrency)))
            results["proxy"].append(asyncio.run(load(proxy_url, "bench.local", args.requests, args.concurrency)))
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)

    print(f"router bench: {args.requests} GETs x {args.rounds} rounds, concurrency {args.concurrency}, loopback, "
          f"cpus {os.cpu_count()}")
    summary = {}
    for name, rounds in results.items():
        rps = statistics.median(r[0] for r in rounds)
        all_lat = [v for r in rounds for v in r[1]]
        summary[name] = (rps, statistics.median(all_lat), p99(all_lat))
        print(f"  {name:<6} {rps:9.0f} req/s   median {summary[name][1]:6.2f} ms   p99 {summary[name][2]:6.2f} ms")
    d, p = summary["direct"], summary["proxy"]
    print(f"  ratio  throughput proxy/direct {p[0] / d[0]:.2f}   median latency proxy/direct {p[1] / d[1]:.2f}   "
          f"added median latency {p[1] - d[1]:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
