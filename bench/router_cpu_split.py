"""Where the CPU goes per request, direct and through each router engine: wrk's, nginx's and the
router's own CPU time over the requests served (``/proc`` and ``getrusage``), with requests/s.

Issue 17 measures throughput with wrk, nginx and the router sharing the machine's cores. When the
cores are the limit, throughput through a router is at most (wrk + nginx CPU per direct request) /
(wrk + nginx + router CPU per proxied request) of the direct figure, whatever the load; this bench
prints that bound next to the measured ratio, so a ratio can be told apart from noise.

    python bench/router_cpu_split.py                       # -c 1, 16, 64; 4 s each; haproxy and built-in
    python bench/router_cpu_split.py --connections 16 --engines builtin --duration 3

Needs nginx and wrk (and haproxy for that engine): ``apt-get install nginx-light wrk haproxy``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import router_wrk as RW  # noqa: E402  (the bench folder is a path entry, not a package)


def cpu_seconds(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def group_pids(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                out.append(int(entry))
    return out


def run(port: int, connections: int, duration: int, nginx: list[int], router: list[int]) -> dict[str, float]:
    """One wrk run: requests/s and CPU µs per request of wrk, nginx and the router."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    n0, r0 = cpu_seconds(nginx), cpu_seconds(router)
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-H", f"Host: {RW.HOST}",
                          f"http://127.0.0.1:{port}/1k.bin"], capture_output=True, text=True,
                         timeout=duration + 30).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if total is None or rps is None or "Non-2xx" in out:
        raise RuntimeError(f"wrk: unexpected output:\n{out}")
    n = int(total[1])
    wrk = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"rps": float(rps[1]), "wrk": wrk * 1e6 / n, "nginx": (cpu_seconds(nginx) - n0) * 1e6 / n,
            "router": (cpu_seconds(router) - r0) * 1e6 / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--duration", type=int, default=4)
    parser.add_argument("--engines", default="haproxy,builtin", help="comma list of haproxy, builtin, builtin-aiohttp")
    parser.add_argument("--workers", type=int, default=1, help="built-in router processes (default 1)")
    args = parser.parse_args()
    conns = [int(c) for c in args.connections.split(",")]
    engines = args.engines.split(",")
    if not all(1 <= c <= 1024 for c in conns) or not 1 <= args.duration <= 60 or \
            not set(engines) <= {"haproxy", "builtin", "builtin-aiohttp"}:
        parser.error("bounds: connections 1-1024, duration 1-60 s; engines haproxy, builtin, builtin-aiohttp")
    missing = [t for t in ("nginx", "wrk", *(["haproxy"] if "haproxy" in engines else [])) if shutil.which(t) is None]
    if missing:
        parser.error(f"needs {', '.join(missing)} (apt-get install nginx-light wrk haproxy)")
    tmp = Path(tempfile.mkdtemp(prefix="router-cpu-"))
    os.environ["CRHELPER_HOME"] = str(tmp / "home")
    backend_port = RW.free_port()
    nginx_proc = RW.start_nginx(tmp / "nginx", backend_port)
    nginx = group_pids(nginx_proc.pid)
    started: list[subprocess.Popen[bytes]] = []
    engine = None
    targets: dict[str, tuple[int, list[int]]] = {"direct": (backend_port, [])}
    try:
        if "haproxy" in engines:
            from handlers.routes.engine_haproxy import HAProxyEngine
            from handlers.routes.model import Route
            from handlers.routes.registry import ServiceRegistry
            from handlers.routes.repository import RouteRepository

            repo, registry = RouteRepository(tmp / "h" / "routes.db"), ServiceRegistry(tmp / "h" / "services.json")
            repo.create_app("bench")
            repo.create_route("bench", Route(type="http", service="bench-web", domain=RW.HOST))
            registry.register("bench-web", f"127.0.0.1:{backend_port}")
            engine = HAProxyEngine(repo, registry, b"b" * 32)
            engine.start()
            worker = engine.worker_pid()
            targets["haproxy"] = (engine.http_port, [worker] if worker else [])
        for name in [e for e in engines if e.startswith("builtin")]:
            port = RW.free_port()
            proc = RW.start_router(tmp / name, port, backend_port, args.workers, fast_path=name == "builtin")
            started.append(proc)
            time.sleep(0.5)
            targets[name] = (port, group_pids(proc.pid))
        for port, _ in targets.values():
            RW.run_wrk(port, 16, 1)
        load = os.getloadavg()
        print(f"router cpu split: nginx 1 KiB static (1 worker), wrk -t1 -d{args.duration}s, cpus {os.cpu_count()}, "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; CPU µs per request")
        for c in conns:
            results = {name: run(port, c, args.duration, nginx, pids) for name, (port, pids) in targets.items()}
            direct = results["direct"]
            for name, r in results.items():
                line = (f"  -c{c:<3} {name:16} {r['rps']:8.0f} req/s   wrk {r['wrk']:6.1f}   nginx {r['nginx']:6.1f}"
                        f"   router {r['router']:6.1f}")
                if name != "direct":
                    bound = (direct["wrk"] + direct["nginx"]) / (r["wrk"] + r["nginx"] + r["router"])
                    line += f"   ratio {r['rps'] / direct['rps']:.2f}   cpu bound {bound:.2f}"
                print(line)
    finally:
        for proc in started:
            RW.stop(proc)
        if engine is not None:
            engine.stop()
        RW.stop(nginx_proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
