"""Concurrency of the local ROS: independent resources whose provider sleeps 1 s each.

    python bench/stack_bench.py [--resources 200] [--sleep 1.0] [--parallelism 0] [--runs 3]
                                [--mode inprocess|endpoints]

Sequential delivery would take 200 s; the emulator starts independent resources together (ROS's
Parallelism defaults to no limit), so create (and delete) should finish in just over one sleep.
Target (issue 18): 200 resources created in under 2 s, every run. Prints each run's times (with
the process's CPU seconds: on 2 shared cores the per-request work, not the sleep, sets the
figure) and PASS/MISS; exit 0 on PASS. The provider runs in-process (`mode: inprocess`) by
default, which measures the emulator and its ResponseURL path rather than process start-up; it
keeps its idempotency store (SQLite) in the run's own home, as `crhelper stack` does.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this tree's crhelper, not the installed one (a worktree A/B measures its own code)

from crhelper import Provider, Request, Result  # noqa: E402

TARGET_SECONDS = 2.0
TOKEN = "acs:fc:cn-hangzhou:123456789:services/bench/functions/sleeper"
SLEEP_SECONDS = 1.0

provider = Provider()


@provider.create("Custom::Sleep")
def create(props: dict, request: Request) -> Result:
    time.sleep(float(props.get("Seconds", SLEEP_SECONDS)))
    return Result(physical_id=f"sleep-{request.logical_resource_id}", data={"Slept": props.get("Seconds")})


@provider.delete("Custom::Sleep")
def delete(props: dict, request: Request) -> None:
    time.sleep(float(props.get("Seconds", SLEEP_SECONDS)))


def template(resources: int, seconds: float) -> str:
    body = {
        f"Sleep{i:02d}": {"Type": "Custom::Sleep", "Properties": {"ServiceToken": TOKEN, "Timeout": 30,
                                                                   "Parameters": {"Seconds": seconds}}}
        for i in range(resources)
    }
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": body})


def main(argv: list[str] | None = None) -> int:
    from crhelper.emulator import StackEmulator
    from crhelper.emulator.delivery import StackDelivery
    from crhelper.emulator.delivery_bindings import Bindings

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resources", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=SLEEP_SECONDS)
    parser.add_argument("--parallelism", type=int, default=0, help="the stack's Parallelism (0: no limit, as in ROS)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--mode", choices=("inprocess", "endpoints"), default="inprocess")
    args = parser.parse_args(argv)
    bindings = Bindings(mode=args.mode).with_flags([f"{TOKEN}={Path(__file__).resolve()}:provider"])
    creates: list[float] = []
    ok = True
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory() as home, StackEmulator(home) as emulator:
            os.environ["CRHELPER_HOME"] = home  # the providers' state store lives in the run's home
            with StackDelivery(bindings) as deliver:
                cpu, started = time.process_time(), time.monotonic()
                created = emulator.create("bench", template(args.resources, args.sleep), {}, deliver,
                                          parallelism=args.parallelism)
                create_seconds, create_cpu = time.monotonic() - started, time.process_time() - cpu
                cpu, started = time.process_time(), time.monotonic()
                deleted = emulator.delete("bench", deliver)
                delete_seconds, delete_cpu = time.monotonic() - started, time.process_time() - cpu
        creates.append(create_seconds)
        ok = ok and created.status == "CREATE_COMPLETE" and deleted.status == "DELETE_COMPLETE"
        print(f"run {run}: {args.resources} resources x {args.sleep:g} s sleep, parallelism {args.parallelism}, "
              f"mode {args.mode}: create {create_seconds:.2f} s (cpu {create_cpu:.2f} s, {created.status}), "
              f"delete {delete_seconds:.2f} s (cpu {delete_cpu:.2f} s, {deleted.status})")
    worst = max(creates)
    verdict = "PASS" if ok and worst < TARGET_SECONDS else "MISS"
    print(f"create: median {statistics.median(creates):.2f} s, worst {worst:.2f} s over {len(creates)} runs; "
          f"target every create < {TARGET_SECONDS:g} s: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
