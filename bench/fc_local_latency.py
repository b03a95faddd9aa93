"""Cold and warm invocation latency of one function on the local Function Compute (issue 14).

    python bench/fc_local_latency.py [--samples 20] [--warm 50]

One function, the sample greeting provider (`samples/greeting.py`: pydantic model) behind the lazy FC
entry (`crhelper.fc.handler`), answering a Create to a local ResponseURL server, invoked through the
real `fc2` SDK (sync). Measured client-side, interleaved per sample:

- cold, forked: a new function version (a changed environment variable: FC never reuses an old
  version's instance), so the next call starts an instance, forked by the process's fork server;
- cold, spawned: the same on an endpoint with the fork server off (`python -m
  crhelper.local.fc_worker`, what every invocation cost before instances were reused);
- warm: the same function again, served by its idle instance.

The very first call of the process (the fork server starting and importing) is printed apart. Prints
medians and p90 in milliseconds; target: a forked cold start at most half a spawned one, and warm under
50 ms. Exit 0 on PASS. The figures move with the machine's load (printed with `uptime`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROVIDER = f"{ROOT / 'samples' / 'greeting.py'}:provider"
WARM_TARGET_MS = 50.0


def _event(responses: Any, index: int) -> bytes:
    event = {"RequestType": "Create", "RequestId": f"req-{index}-{time.monotonic_ns()}", "StackId": "stack-bench",
             "StackName": "bench", "LogicalResourceId": f"Greeting{index}", "ResourceType": "Custom::Greeting",
             "ResourceProperties": {"Name": "bench", "Times": 2}}
    return json.dumps(responses.attach(event)).encode("utf-8")


def _invoke(fc: Any, client: Any, function: str, payload: bytes) -> float:
    started = time.perf_counter()
    response = client.invoke_function("bench", function, payload=payload)
    elapsed = (time.perf_counter() - started) * 1000
    if json.loads(response.data).get("Status") != "SUCCESS":
        raise SystemExit(f"the provider did not succeed: {response.data[:300]!r}")
    return elapsed


def _stats(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return f"median {statistics.median(ordered):7.1f} ms   p90 {p90:7.1f} ms   (n={len(ordered)})"


def main(argv: list[str] | None = None) -> int:
    from crhelper.local.fc_server import LocalFunctionCompute
    from crhelper.local.fc_runner import FORK_SETTING
    from crhelper.local.response_server import ResponseServer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20, help="cold starts of each kind")
    parser.add_argument("--warm", type=int, default=50, help="warm invocations")
    args = parser.parse_args(argv)
    env = {"CRHELPER_PROVIDER": PROVIDER, "CRHELPER_STORE": "none"}
    previous = os.environ.pop(FORK_SETTING, None)
    try:
        forked_fc = LocalFunctionCompute().start()
        os.environ[FORK_SETTING] = "false"
        spawned_fc = LocalFunctionCompute().start()
    finally:
        os.environ.pop(FORK_SETTING, None)
        if previous is not None:
            os.environ[FORK_SETTING] = previous
    cold_fork: list[float] = []
    cold_spawn: list[float] = []
    warm: list[float] = []
    with ResponseServer() as responses:
        try:
            forked, spawned = forked_fc.client(), spawned_fc.client()
            forked_fc.register("bench", "greeting", "crhelper.fc.handler", timeout=30, env=env)
            first = _invoke(forked_fc, forked, "greeting", _event(responses, 0))
            for i in range(1, args.samples + 1):
                version = {**env, "BENCH_VERSION": str(i)}
                forked_fc.register("bench", "greeting", "crhelper.fc.handler", timeout=30, env=version)
                spawned_fc.register("bench", "greeting", "crhelper.fc.handler", timeout=30, env=version)
                pair = [("fork", forked_fc, forked), ("spawn", spawned_fc, spawned)]
                for kind, fc, client in (pair if i % 2 else pair[::-1]):  # interleaved, alternating order
                    (cold_fork if kind == "fork" else cold_spawn).append(_invoke(fc, client, "greeting", _event(responses, i)))
            for i in range(args.warm):
                warm.append(_invoke(forked_fc, forked, "greeting", _event(responses, 1000 + i)))
        finally:
            forked_fc.stop()
            spawned_fc.stop()
    fork_median, spawn_median, warm_median = (statistics.median(v) for v in (cold_fork, cold_spawn, warm))
    print(f"local FC invocation latency, samples/greeting.py Create (sync, fc2 SDK), cpus {os.cpu_count()}")
    print(f"  first call of the process (fork server starting): {first:7.1f} ms")
    print(f"  cold, forked   {_stats(cold_fork)}")
    print(f"  cold, spawned  {_stats(cold_spawn)}")
    print(f"  warm           {_stats(warm)}")
    ok = fork_median <= spawn_median / 2 and warm_median < WARM_TARGET_MS
    print(f"forked cold / spawned cold = {fork_median / spawn_median:.2f} (target <= 0.5), warm median "
          f"{warm_median:.1f} ms (target < {WARM_TARGET_MS:g} ms): {'PASS' if ok else 'MISS'}")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
