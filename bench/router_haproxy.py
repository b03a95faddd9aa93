"""The HAProxy engine's throughput against the backend direct, measured as issue 17 says.

The backend is nginx serving a 1 KiB static file on loopback (so it is not the bottleneck); the
load is wrk (``-t1 -cN -d5s``, Debian's package); router, backend and wrk share the machine's
cores. For each connection count, direct and through ``crhelper router serve --engine haproxy``
(the engine class, programmed from a route store like the command) alternate for ``--rounds``
pairs; the ratio is the router's requests/s over direct requests/s in the same run, with the
added median latency. ``uptime`` before and after says how loaded the machine was.

    python bench/router_haproxy.py                     # -c 1, 16, 64; 5 s each; 2 pairs
    python bench/router_haproxy.py --connections 16 --duration 3 --rounds 1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HOST = "bench.local"
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def start_nginx(root: Path, port: int) -> subprocess.Popen[bytes]:
    """nginx in the foreground, one worker, access log off, the 1 KiB file at ``/``."""
    www = root / "www"
    www.mkdir()
    (www / "index.html").write_bytes(b"x" * 1023 + b"\n")
    temp = "".join(f"    {name}_temp_path {root}/{name};\n" for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (root / "nginx.conf").write_text(
        f"worker_processes 1;\ndaemon off;\npid {root}/nginx.pid;\nerror_log {root}/error.log;\nuser root;\n"
        "events { worker_connections 4096; }\n"
        f"http {{\n    access_log off;\n{temp}    server {{\n        listen 127.0.0.1:{port};\n"
        f"        root {www};\n        location / {{ }}\n    }}\n}}\n")
    return subprocess.Popen(["nginx", "-c", str(root / "nginx.conf"), "-p", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (``/proc/<pid>/stat``, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(port: int, connections: int, duration: int, pid: int | None = None) -> tuple[float, float, float | None]:
    """(requests/s, median latency in ms, CPU µs per request of process ``pid`` if given) of one
    wrk run. CPU time per request is what the load on a shared machine disturbs least."""
    began = cpu_seconds(pid) if pid is not None else 0.0
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-H", f"Host: {HOST}",
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=duration + 30).stdout
    used = cpu_seconds(pid) - began if pid is not None else None
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    median = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if rps is None or total is None or median is None or errors is not None:
        raise RuntimeError(f"wrk: unexpected output or errors:\n{out}")
    per_request = used * 1e6 / int(total[1]) if used is not None else None
    return float(rps[1]), float(median[1]) * UNITS[median[2]], per_request


def start_bare_haproxy(root: Path, port: int, backend_port: int) -> subprocess.Popen[bytes]:
    """``--bare``: a minimal HAProxy (one frontend, one server, no matching), to tell the cost of
    HAProxy's extra hop from the cost of the engine's Flynn matching rules."""
    (root / "bare.cfg").write_text(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 30s\n    timeout server 30s\n"
        f"frontend bare\n    bind 127.0.0.1:{port}\n    default_backend nginx\n"
        f"backend nginx\n    server s0 127.0.0.1:{backend_port}\n")
    return subprocess.Popen(["haproxy", "-db", "-f", str(root / "bare.cfg")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _cpu(runs: list[tuple[float, float, float | None]]) -> str:
    values = [r[2] for r in runs if r[2] is not None]
    return f"{statistics.median(values):.1f} µs" if values else "-"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="direct/haproxy pairs per connection count")
    parser.add_argument("--bare", action="store_true",
                        help="also measure a minimal HAProxy config (no matching) in the same rounds")
    args = parser.parse_args()
    if not all(0 < c <= 1024 for c in args.connections) or not 0 < args.duration <= 60 or not 0 < args.rounds <= 10:
        parser.error("bounds: connections 1-1024, duration 1-60 s, rounds 1-10")
    missing = [tool for tool in ("nginx", "wrk", "haproxy") if shutil.which(tool) is None]
    if missing:
        print(f"router_haproxy bench: needs {', '.join(missing)} (apt-get install nginx wrk haproxy)", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="router-haproxy-bench-"))
    os.environ["CRHELPER_HOME"] = str(root / "home")
    from crhelper.local.supervisor import wait_port
    from handlers.routes.engine_haproxy import HAProxyEngine, free_port
    from handlers.routes.model import Route
    from handlers.routes.registry import ServiceRegistry
    from handlers.routes.repository import RouteRepository

    backend_port = free_port("127.0.0.1")
    repo, registry = RouteRepository(), ServiceRegistry()
    repo.create_app("bench")
    repo.create_route("bench", Route(type="http", service="bench-web", domain=HOST))
    registry.register("bench-web", f"127.0.0.1:{backend_port}")
    nginx = start_nginx(root, backend_port)
    bare_port = free_port("127.0.0.1")
    bare = start_bare_haproxy(root, bare_port, backend_port) if args.bare else None
    engine = HAProxyEngine(repo, registry, b"b" * 32)
    before = uptime()
    results: dict[int, dict[str, list[tuple[float, float, float | None]]]] = {}
    try:
        if not wait_port("127.0.0.1", backend_port, 10, alive=lambda: nginx.poll() is None):
            raise RuntimeError(f"nginx did not listen on {backend_port}: {(root / 'error.log').read_text()}")
        engine.start()
        worker = engine.worker_pid()
        targets: dict[str, tuple[int, int | None]] = {"direct": (backend_port, None),
                                                       "haproxy": (engine.http_port, worker)}
        if bare is not None:
            targets["bare"] = (bare_port, bare.pid)
            if not wait_port("127.0.0.1", bare_port, 10, alive=lambda: bare.poll() is None):
                raise RuntimeError("the bare haproxy did not start")
        for target, _ in targets.values():  # warm every path once
            wrk(target, 16, 1)
        for connections in args.connections:
            runs: dict[str, list[tuple[float, float, float | None]]] = {name: [] for name in targets}
            for _ in range(args.rounds):
                for name, (target, pid) in targets.items():
                    runs[name].append(wrk(target, connections, args.duration, pid))
            results[connections] = runs
    finally:
        engine.stop()
        if bare is not None:
            bare.terminate()
            bare.wait(10)
        nginx.terminate()
        nginx.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    after = uptime()
    version = subprocess.run(["haproxy", "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"router haproxy bench: nginx 1 KiB file, wrk -t1 -d{args.duration}s, {args.rounds} direct/haproxy pairs "
          f"per count, loopback, cpus {os.cpu_count()}; {version}")
    print(f"  uptime before: {before}\n  uptime after:  {after}")
    print("  conns   direct req/s   haproxy req/s   ratio   median direct   median haproxy   added     cpu/req")
    for connections, runs in results.items():
        direct = statistics.median(r[0] for r in runs["direct"])
        proxied = statistics.median(r[0] for r in runs["haproxy"])
        ratios = [h[0] / d[0] for d, h in zip(runs["direct"], runs["haproxy"])]
        d_lat = statistics.median(r[1] for r in runs["direct"])
        h_lat = statistics.median(r[1] for r in runs["haproxy"])
        print(f"  {connections:5d}   {direct:12.0f}   {proxied:13.0f}   {statistics.median(ratios):5.2f}"
              f"   {d_lat:10.3f} ms   {h_lat:11.3f} ms   {h_lat - d_lat:+.3f} ms   {_cpu(runs['haproxy'])}")
        if "bare" in runs:
            bare_ratio = statistics.median(b[0] / d[0] for d, b in zip(runs["direct"], runs["bare"]))
            print(f"  {'':5}   bare haproxy (no matching): {statistics.median(r[0] for r in runs['bare']):.0f} req/s, "
                  f"ratio {bare_ratio:.2f}, median {statistics.median(r[1] for r in runs['bare']):.3f} ms, "
                  f"cpu/req {_cpu(runs['bare'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
