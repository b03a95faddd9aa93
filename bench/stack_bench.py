"""Concurrency of the local ROS: 50 independent resources whose provider sleeps 1 s each.

    python bench/stack_bench.py [--resources 50] [--sleep 1.0] [--mode inprocess|endpoints]

Sequential delivery would take 50 s; the emulator starts independent resources together, so
create (and delete) should finish in just over one sleep. Target: create under 3 s. Prints the
times and PASS/MISS; exit 0 on PASS. The provider runs in-process (`mode: inprocess`) by default,
which measures the emulator and its ResponseURL path rather than process start-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from crhelper import Provider, Request, Result

TARGET_SECONDS = 3.0
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
    parser.add_argument("--resources", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=SLEEP_SECONDS)
    parser.add_argument("--mode", choices=("inprocess", "endpoints"), default="inprocess")
    args = parser.parse_args(argv)
    bindings = Bindings(mode=args.mode).with_flags([f"{TOKEN}={Path(__file__).resolve()}:provider"])
    with tempfile.TemporaryDirectory() as home, StackEmulator(home, max_concurrency=64) as emulator:
        with StackDelivery(bindings) as deliver:
            started = time.monotonic()
            created = emulator.create("bench", template(args.resources, args.sleep), {}, deliver)
            create_seconds = time.monotonic() - started
            started = time.monotonic()
            deleted = emulator.delete("bench", deliver)
            delete_seconds = time.monotonic() - started
    verdict = "PASS" if created.status == "CREATE_COMPLETE" and create_seconds < TARGET_SECONDS else "MISS"
    print(f"{args.resources} resources x {args.sleep:g} s sleep, mode {args.mode}: "
          f"create {create_seconds:.2f} s ({created.status}), delete {delete_seconds:.2f} s ({deleted.status}); "
          f"target create < {TARGET_SECONDS:g} s: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
