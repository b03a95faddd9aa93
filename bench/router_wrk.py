"""Router throughput as issue 17 measures it: nginx serves a 1 KiB static file on loopback, wrk
(``-t1 -c1|16|64 -d5s``) loads it directly and through the router, all on the same cores.

For each connection count the runs are interleaved in pairs (direct, router, direct, router...);
the ratio is the router's requests/s over the direct requests/s of the same pair, and the added
latency is the router's median minus the direct median (wrk ``--latency``); ``cpu/req`` is the CPU
time of all router processes over the requests they served (less sensitive to other load). The router is
``crhelper router serve`` in its own process group (``--workers`` router processes on one port).

    python bench/router_wrk.py [--connections 1,16,64] [--duration 5] [--pairs 2] [--workers N]
    python bench/router_wrk.py --no-fast-path     # every request through aiohttp (the path before the fast one)

nginx and wrk must be installed (Debian: ``apt-get install nginx-light wrk``; nginx is started
with its own config in a temp dir, never the system service). Exits 1 when a ratio is under the
target (0.5x) at any connection count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from router_bench import free_port, wait_port  # noqa: E402  (the bench folder is a path entry, not a package)

TARGET = 0.5
HOST = "bench.local"
NGINX_CONF = """\
worker_processes {workers};
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/www;
        location / {{ }}
    }}
}}
"""


def start_nginx(tmp: Path, port: int, workers: int = 1) -> subprocess.Popen[bytes]:
    """nginx on 127.0.0.1:``port`` serving ``/1k.bin`` (1,024 bytes) from ``tmp/www``."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    (tmp / "www").mkdir(parents=True, exist_ok=True)
    (tmp / "www" / "1k.bin").write_bytes(b"x" * 1024)
    for path in (tmp.parent, tmp, tmp / "www"):  # nginx workers run as an unprivileged user when we are root
        path.chmod(0o755)
    (tmp / "www" / "1k.bin").chmod(0o644)
    (tmp / "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, port=port, workers=workers))
    proc = subprocess.Popen([nginx, "-c", str(tmp / "nginx.conf"), "-p", str(tmp)], start_new_session=True)
    wait_port(port, 30.0)
    return proc


def parse_wrk(output: str) -> tuple[float, float]:
    """(requests/s, median latency ms) from ``wrk --latency`` output."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    value, unit = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", output, re.M).groups()  # type: ignore[union-attr]
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} non-2xx responses:\n{output}")
    return rps, float(value) * scale


def run_wrk(port: int, connections: int, duration: int, host: str = HOST) -> tuple[float, float]:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-H", f"Host: {host}",
         f"http://127.0.0.1:{port}/1k.bin"],
        capture_output=True, text=True, timeout=duration + 30, check=True).stdout
    return parse_wrk(out)


def start_router(home: Path, port: int, backend_port: int, workers: int, source: Path = ROOT,
                 fast_path: bool = True) -> subprocess.Popen[bytes]:
    """``crhelper router serve`` with one route ``bench.local`` -> the backend, in a fresh home
    (``source``: the tree to import ``crhelper`` and ``handlers`` from, e.g. an older commit's)."""
    env = {**os.environ, "CRHELPER_HOME": str(home), "PYTHONPATH": str(source), "CRHELPER_ROUTER_WORKERS": str(workers)}
    env.pop("CRHELPER_ROUTER_SERVICES", None)
    env["CRHELPER_ROUTER_FAST_PATH"] = "1" if fast_path else "0"
    setup = (
        "from handlers.routes.model import Route\n"
        "from handlers.routes.registry import register\n"
        "from handlers.routes.repository import RouteRepository\n"
        "repo = RouteRepository()\n"
        "repo.create_app('bench')\n"
        f"repo.create_route('bench', Route(type='http', service='bench-web', domain={HOST!r}))\n"
        f"register('bench-web', '127.0.0.1:{backend_port}')\n"
    )
    subprocess.run([sys.executable, "-c", setup], env=env, check=True)
    serve = "import sys; from crhelper.cli.main import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", serve, "router", "serve", "--port", str(port), "--no-https"],
                            env=env, start_new_session=True, stderr=subprocess.DEVNULL)
    wait_port(port, 60.0)  # imports take long on a loaded machine
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process group we started (nginx master and workers, router and its workers)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every process in a process group (the router and its workers)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5, pgrp
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def pairs(connections: int, duration: int, count: int, direct: int, routed: int,
          router_pgid: int) -> Iterator[dict[str, float]]:
    for _ in range(count):
        d_rps, d_lat = run_wrk(direct, connections, duration)
        before = group_cpu_seconds(router_pgid)
        r_rps, r_lat = run_wrk(routed, connections, duration)
        cpu = group_cpu_seconds(router_pgid) - before
        yield {"direct_rps": d_rps, "router_rps": r_rps, "direct_p50_ms": d_lat, "router_p50_ms": r_lat,
               "router_cpu_us": 1e6 * cpu / max(1.0, r_rps * duration)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=0, help="router processes (0: the router's default)")
    parser.add_argument("--source", type=Path, default=ROOT,
                        help="import the router from this tree (e.g. `git archive` of an older commit)")
    parser.add_argument("--no-fast-path", action="store_true",
                        help="serve every request through aiohttp (CRHELPER_ROUTER_FAST_PATH=0)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    if not all(1 <= c <= 1024 for c in conns) or not 1 <= args.duration <= 60 or not 1 <= args.pairs <= 10:
        parser.error("bounds: connections 1-1024, duration 1-60 s, pairs 1-10")
    for tool in ("wrk",):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed")
    workers = args.workers or (os.cpu_count() or 1)
    tmp = Path(tempfile.mkdtemp(prefix="router-wrk-"))
    backend_port, router_port = free_port(), free_port()
    nginx = start_nginx(tmp / "nginx", backend_port)
    router = None
    try:
        router = start_router(tmp / "home", router_port, backend_port, workers, args.source, not args.no_fast_path)
        run_wrk(router_port, 16, 1)  # warm-up
        run_wrk(backend_port, 16, 1)
        load = os.getloadavg()
        results = {c: list(pairs(c, args.duration, args.pairs, backend_port, router_port, router.pid)) for c in conns}
    finally:
        if router is not None:
            stop(router)
        stop(nginx)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"router wrk bench: nginx 1 KiB static, wrk -t1 -d{args.duration}s, {args.pairs} interleaved pairs, "
          f"router workers {workers}, fast path {'off' if args.no_fast_path else 'on'}, cpus {os.cpu_count()}, load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    missed = False
    summary = {}
    for c, runs in results.items():
        ratio = statistics.median(r["router_rps"] / r["direct_rps"] for r in runs)
        d_rps = statistics.median(r["direct_rps"] for r in runs)
        r_rps = statistics.median(r["router_rps"] for r in runs)
        added = statistics.median(r["router_p50_ms"] - r["direct_p50_ms"] for r in runs)
        cpu = statistics.median(r["router_cpu_us"] for r in runs)
        verdict = "PASS" if ratio >= TARGET else "MISS"
        missed |= ratio < TARGET
        summary[c] = {"direct_rps": d_rps, "router_rps": r_rps, "ratio": ratio, "added_p50_ms": added,
                      "router_cpu_us_per_request": cpu}
        print(f"  -c{c:<3} direct {d_rps:9.0f} req/s   router {r_rps:9.0f} req/s   ratio {ratio:.2f}x "
              f"(target >= {TARGET}x {verdict})   added median latency {added:6.2f} ms   router cpu/req {cpu:5.0f} us")
    if args.json:
        print(json.dumps(summary))
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
