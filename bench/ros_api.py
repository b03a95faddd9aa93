"""The local ROS API's latency through the official SDK: GetStack and ListStackEvents on a stack of 100
resources and 1,000 events (median; target <= 20 ms each), and how soon a resource's completion is
visible through the API (target <= 0.5 s).

    python bench/ros_api.py [--rounds 200] [--json]

A stack of 100 Custom::Bench resources (this file's in-process provider) is created through the
SDK and updated until it has at least 1,000 events; then GetStack, ListStackEvents (PageSize 50,
the first page, and the last page), ListStackResources and DescribeRegions (no stack work: the floor
that the SDK, signing and HTTP cost) are called `--rounds` times each, interleaved. Completion ->
visible: a resource whose provider takes 0.3 s records the wall time it
returned; a client polling ListStackEvents every 10 ms notes when its CREATE_COMPLETE event first
shows (20 runs; the poll interval bounds the resolution). The load average is printed with the figures.
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
sys.path.insert(0, str(REPO))  # this tree's crhelper, not the installed one (a worktree A/B measures its own code)

from crhelper import Provider, Request, Result  # noqa: E402

provider = Provider()
HERE = Path(__file__).resolve()
TOKEN = "acs:fc:cn-hangzhou:123456789:services/bench/functions/ros"


@provider.create("Custom::Bench")
def _create(props: dict, request: Request) -> Result:
    time.sleep(float(props.get("Sleep", 0)))
    return Result(physical_id=f"bench-{request.logical_resource_id}", data={"DoneAt": repr(time.time())})


@provider.update("Custom::Bench")
def _update(props: dict, old: dict, request: Request) -> Result:
    return Result(data={"DoneAt": repr(time.time())})


@provider.delete("Custom::Bench")
def _delete(props: dict, request: Request) -> None:
    return None


def _template(count: int, generation: int, sleep: float = 0.0) -> str:
    resources = {f"R{i:03d}": {"Type": "Custom::Bench", "Properties": {
        "ServiceToken": TOKEN, "Timeout": 60, "Parameters": {"Generation": generation, "Sleep": sleep}}}
        for i in range(count)}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01", "Resources": resources})


def _wait(client: Any, models: Any, region: str, stack_id: str, interval: float = 0.05) -> str:
    while True:
        status = str(client.get_stack(models.GetStackRequest(region_id=region, stack_id=stack_id)).body.status)
        if not status.endswith("IN_PROGRESS"):
            return status
        time.sleep(interval)


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered) * 1000, 2),
            "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 2), "n": len(ordered)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--visibility-runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from alibabacloud_ros20190910 import models as m

    from crhelper.emulator.delivery_bindings import Bindings
    from crhelper.ros.server import LocalRos

    home = tempfile.mkdtemp(prefix="ros-api-bench-")
    os.environ["CRHELPER_HOME"] = home
    os.environ.setdefault("CRHELPER_LOG_LEVEL", "WARNING")
    bindings = Bindings(providers={TOKEN: f"{HERE}:provider"}, mode="inprocess")
    results: dict[str, Any] = {}
    with LocalRos(home=home, bindings=bindings, capture_output=True) as ros:
        client, region = ros.client(), ros.region
        began = time.monotonic()
        stack_id = client.create_stack(m.CreateStackRequest(region_id=region, stack_name="bench",
                                                            template_body=_template(100, 0))).body.stack_id
        assert _wait(client, m, region, stack_id) == "CREATE_COMPLETE"
        generation = 0
        while len(ros.stacks.events(stack_id)) < 1000:
            generation += 1
            client.update_stack(m.UpdateStackRequest(region_id=region, stack_id=stack_id,
                                                     template_body=_template(100, generation)))
            assert _wait(client, m, region, stack_id) == "UPDATE_COMPLETE"
        events = len(ros.stacks.events(stack_id))
        setup = time.monotonic() - began
        calls = {
            "DescribeRegions (SDK+HTTP floor)": lambda: client.describe_regions(m.DescribeRegionsRequest()),
            "GetStack": lambda: client.get_stack(m.GetStackRequest(region_id=region, stack_id=stack_id)),
            "ListStackEvents(first page of 50)": lambda: client.list_stack_events(m.ListStackEventsRequest(
                region_id=region, stack_id=stack_id, page_size=50)),
            "ListStackEvents(last page of 50)": lambda: client.list_stack_events(m.ListStackEventsRequest(
                region_id=region, stack_id=stack_id, page_size=50, page_number=(events + 49) // 50)),
            "ListStackResources": lambda: client.list_stack_resources(m.ListStackResourcesRequest(
                region_id=region, stack_id=stack_id)),
        }
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for name, call in calls.items():  # warm-up
            call()
        for _ in range(args.rounds):
            for name, call in calls.items():  # interleaved, so load changes hit every call alike
                start = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - start)
        results["latency"] = {name: _ms(values) for name, values in samples.items()}
        results["stack"] = {"resources": 100, "events": events, "setup_seconds": round(setup, 1)}

        visible: list[float] = []
        for run in range(args.visibility_runs):
            name = f"visible-{run}"
            sid = client.create_stack(m.CreateStackRequest(region_id=region, stack_name=name,
                                                           template_body=_template(1, 0, sleep=0.3))).body.stack_id
            seen_at = None
            while seen_at is None:
                page = client.list_stack_events(m.ListStackEventsRequest(region_id=region, stack_id=sid, page_size=50))
                if any(e.logical_resource_id == "R000" and e.status == "CREATE_COMPLETE" for e in page.body.events):
                    seen_at = time.time()
                    break
                time.sleep(0.01)
            assert _wait(client, m, region, sid) == "CREATE_COMPLETE"
            done_at = float(ros.stacks.resource(sid, "R000")["Data"]["DoneAt"])
            visible.append(seen_at - done_at)
        results["completion_to_visible"] = _ms(visible)
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"stack: 100 resources, {events} events (built in {setup:.1f} s); {args.rounds} rounds, interleaved")
    for name, figures in results["latency"].items():
        print(f"  {name:<36} median {figures['median_ms']:7.2f} ms   p90 {figures['p90_ms']:7.2f} ms")
    figures = results["completion_to_visible"]
    print(f"  {'completion -> visible (ListStackEvents)':<36} median {figures['median_ms']:7.2f} ms   "
          f"p90 {figures['p90_ms']:7.2f} ms   ({figures['n']} runs, 10 ms polls)")
    print(f"load average {' '.join(f'{x:.2f}' for x in results['load_average'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
