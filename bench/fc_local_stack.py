"""A stack of 50 independent resources whose provider sleeps 1 s, through the local endpoints (issue 14).

    python bench/fc_local_stack.py [--resources 50] [--sleep 1.0] [--processes 3]

Every request goes through the local Function Compute endpoint (`--mode endpoints` of
`bench/stack_bench.py`, whose template and provider this reuses): an async invocation per request, run
on a Function Compute instance. Each sample is a fresh Python process doing two create+delete runs,
each with its own emulator, endpoint and `CRHELPER_HOME`: the first run pays the fork server's start
and imports and 50 cold instances, the second only the cold instances (the fork server is shared by
the process's endpoints); each delete runs on the create's warm instances. `cpu` is the CPU seconds
of a whole run (create and delete), split into this process (the emulator, the endpoint's HTTP side,
the ResponseURLs), the fork server itself (its start and imports on a first run, then one fork per
cold start) and the instances: on a shared machine the wall times move with the load, the CPU much less. Target: every create
under 3 s on 2 cores, first run included. Exit 0 on PASS. Under load the figures move (`uptime` printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_SECONDS = 3.0


def _times(pid: int) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of a process; zeros once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def _cpu_seconds() -> tuple[float, float, float]:
    """CPU seconds so far of (this process, the fork server's serving processes themselves, the
    instances they have reaped: every instance of a finished run, as the endpoint's stop ends them).
    The serving processes are the server and its live children between runs (its copies)."""
    from crhelper.local.fc_fork import shared_server

    pid = shared_server().pid
    if pid is None:
        return time.process_time(), 0.0, 0.0
    try:
        copies = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        copies = []
    own = reaped = 0.0
    for serving in (pid, *copies):
        mine, theirs = _times(serving)
        own, reaped = own + mine, reaped + theirs
    return time.process_time(), own, reaped


def _child(resources: int, seconds: float) -> int:
    """Two runs in this process; one JSON line with their figures."""
    sys.path.insert(0, str(HERE))
    from stack_bench import TOKEN, template

    from crhelper.emulator import StackEmulator
    from crhelper.emulator.delivery import StackDelivery
    from crhelper.emulator.delivery_bindings import Bindings

    bindings = Bindings(mode="endpoints").with_flags([f"{TOKEN}={HERE / 'stack_bench.py'}:provider"])
    runs = []
    for _ in range(2):
        cpu = _cpu_seconds()
        with tempfile.TemporaryDirectory() as home, StackEmulator(home) as emulator:
            os.environ["CRHELPER_HOME"] = home
            with StackDelivery(bindings) as deliver:
                started = time.monotonic()
                created = emulator.create("bench", template(resources, seconds), {}, deliver)
                create_seconds = time.monotonic() - started
                started = time.monotonic()
                deleted = emulator.delete("bench", deliver)
                delete_seconds = time.monotonic() - started
        time.sleep(0.5)  # the fork server reaps the stopped endpoint's instances
        split = [after - before for after, before in zip(_cpu_seconds(), cpu)]
        runs.append({"create": create_seconds, "delete": delete_seconds, "cpu": sum(split), "split": split,
                     "ok": created.status == "CREATE_COMPLETE" and deleted.status == "DELETE_COMPLETE"})
    print(json.dumps(runs), flush=True)
    return 0


def _cpu(run: dict) -> str:
    process, server, instances = run["split"]
    return f"{run['cpu']:.2f} s = process {process:.2f} + fork server {server:.2f} + instances {instances:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resources", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=3, help="fresh processes, two runs each")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.resources, args.sleep)
    env = {**os.environ, "CRHELPER_LOG_LEVEL": os.environ.get("CRHELPER_LOG_LEVEL", "WARNING"),
           "PYTHONPATH": os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH", "")) if p)}
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        print("note: PYTHONDONTWRITEBYTECODE is set: modules without a current .pyc are compiled in every process "
              "(fork server and instances included); set PYTHONPYCACHEPREFIX=/tmp/pyc and unset it to measure "
              "what an installed package costs", file=sys.stderr)
    firsts: list[float] = []
    seconds: list[float] = []
    ok = True
    for sample in range(1, args.processes + 1):
        done = subprocess.run([sys.executable, __file__, "--child", "--resources", str(args.resources),
                               "--sleep", str(args.sleep)], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not done.stdout.strip():
            print(done.stderr[-2000:], file=sys.stderr)
            return 2
        first, second = json.loads(done.stdout.strip().splitlines()[-1])
        firsts.append(first["create"])
        seconds.append(second["create"])
        ok = ok and first["ok"] and second["ok"]
        print(f"process {sample}: {args.resources} resources x {args.sleep:g} s through the endpoints: "
              f"first run create {first['create']:.2f} s, delete {first['delete']:.2f} s (cpu {_cpu(first)}); "
              f"second run create {second['create']:.2f} s, delete {second['delete']:.2f} s (cpu {_cpu(second)})"
              f"{'' if first['ok'] and second['ok'] else ' (NOT COMPLETE)'}")
    worst = max(firsts + seconds)
    verdict = "PASS" if ok and worst < TARGET_SECONDS else "MISS"
    print(f"create: first runs median {statistics.median(firsts):.2f} s, second runs median "
          f"{statistics.median(seconds):.2f} s, worst {worst:.2f} s; target every create < {TARGET_SECONDS:g} s: {verdict}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
