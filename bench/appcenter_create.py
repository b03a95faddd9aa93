"""AppCenter cluster create time (issue 13): a 5-node local cluster through the stack emulator in process,
against its critical path.

The package is samples/appcenter-demo (1 store node + 4 web nodes here) with every service command
run through `bin/timed.sh`, a wrapper that stamps the command's own begin and end (`date +%s.%N`)
around the package's `ctl.sh`; `env.delay` makes each command sleep a known time first. The create
plan is four order groups: init (5 nodes), custom_metadata (4), start order 0 (store), start order 1
(4 web; each start runs the node's server and returns once it listens). The critical path is the
sum over those groups of the slowest command, measured from the stamps, not assumed. The create
time is the emulator's `create` call, stack CREATE_IN_PROGRESS to CREATE_COMPLETE, on the embedded
default settings; only the AppCenter poll interval may be set (the issue makes it a setting), and
the output states it. Every run gets a fresh `$CRHELPER_HOME` (so it also starts its supervisor
daemon, as a first `crhelper stack create` does), runs interleaved across the poll settings, and
the stack is deleted afterwards (`--keep-home`: one home for all runs, its daemon already up after the
first). No peer: nothing else deploys AppCenter packages.

    python bench/appcenter_create.py --runs 5 --poll-intervals default,0.1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _stats import Verdict, median, table  # noqa: E402

SAMPLE = REPO / "samples" / "appcenter-demo"
TOKEN = "acs:fc:cn-hangzhou:123456789:services/crhelper-appcenter/functions/provider"
PROVIDER = "handlers.appcenter.provider:provider"
POLL_ENV = "CRHELPER_APPCENTER_POLL_INTERVAL"
WEB_NODES = 4  # plus the one store node: 5
PORT = 18481
#: The create plan's order groups, as (label, service, role or None for every role) in plan order.
GROUPS = (("init (order 0)", "init", None), ("custom_metadata", "token", None),
          ("start order 0 (store)", "start", "store"), ("start order 1 (web)", "start", "web"))
TIMED = """#!/bin/sh
# bench: the command's own begin and end around the package's ctl.sh
begin=$(date +%s.%N)
sh "$APPCENTER_PACKAGE_DIR/bin/ctl.sh" "$@"
code=$?
echo "$begin $(date +%s.%N) $1 ${APPCENTER_HOST_ROLE:-?} ${APPCENTER_HOST_SID:-?} $code" >> "$APPCENTER_ENV_JOURNAL.stamps"
exit $code
"""


def bench_package(root: Path) -> Path:
    """The sample package, each service command wrapped by timed.sh."""
    target = root / "appcenter-bench"
    shutil.copytree(SAMPLE, target)
    template = target / "cluster.json.mustache"
    text = template.read_text()
    wrapped = text.replace("$APPCENTER_PACKAGE_DIR/bin/ctl.sh ", "$APPCENTER_PACKAGE_DIR/bin/timed.sh ")
    if wrapped == text:
        raise SystemExit("the sample's commands no longer run bin/ctl.sh: update bench/appcenter_create.py")
    template.write_text(wrapped)
    (target / "bin" / "timed.sh").write_text(TIMED)
    return target


def template(package: Path, journal: Path, delay: float) -> str:
    props = {"Package": str(package), "Version": "1.0.0", "Backend": "local", "Language": "en",
             "Inputs": {"cluster.web.count": WEB_NODES, "env.port": PORT, "env.delay": delay,
                        "env.journal": str(journal)}}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01",
                       "Resources": {"App": {"Type": "Custom::AppCluster",
                                             "Properties": {"ServiceToken": TOKEN, "Timeout": 600, "Parameters": props}}}})


@dataclass(frozen=True)
class Stamp:
    begin: float
    end: float
    service: str
    role: str
    sid: str
    code: int


def read_stamps(path: Path) -> list[Stamp]:
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        begin, end, service, role, sid, code = line.split()
        found.append(Stamp(float(begin), float(end), service, role, sid, int(code)))
    return found


@dataclass
class Run:
    setting: str
    total: float
    delete: float
    critical: float
    parts: dict[str, float]  # where the time beyond the critical path went
    slowest: dict[str, float]  # per group


def one_run(root: Path, package: Path, index: int, poll: str, delay: float, keep_home: bool = False) -> Run:
    """One create (and delete) in a fresh home (`keep_home`: the same one, its supervisor daemon
    left running between runs), on the given poll setting ("default": unset)."""
    from crhelper.emulator import StackEmulator
    from crhelper.emulator.delivery import StackDelivery
    from crhelper.emulator.delivery_bindings import Bindings
    from crhelper.local.supervisor import SupervisorClient
    from crhelper.paths import home, state_dir
    from handlers.appcenter.state import SqliteClusterStore, default_path

    run_dir = root / f"run{index}"
    os.environ["CRHELPER_HOME"] = str((root if keep_home else run_dir) / "home")
    if poll == "default":
        os.environ.pop(POLL_ENV, None)
    else:
        os.environ[POLL_ENV] = poll
    journal = run_dir / "journal.log"
    run_dir.mkdir(parents=True)
    emulator = StackEmulator(home())
    events: list[Any] = []
    try:
        with StackDelivery(Bindings({TOKEN: PROVIDER}, mode="inprocess")) as deliver:
            started = time.time()
            status = emulator.create("bench", template(package, journal, delay), {}, deliver,
                                     on_event=events.append).status
            finished = time.time()
        if status != "CREATE_COMPLETE":
            reasons = [e.reason for e in events if e.status.endswith("FAILED")]
            raise SystemExit(f"run {index}: {status}: {reasons}")
        (record,) = SqliteClusterStore(default_path()).list()
        launched = launch_times(record, state_dir("appcenter") / "clusters" / record.cluster_id / "invocations")
        with StackDelivery(Bindings({TOKEN: PROVIDER}, mode="inprocess")) as deliver:
            deleting = time.perf_counter()
            status = emulator.delete("bench", deliver).status
            delete = time.perf_counter() - deleting
        if status != "DELETE_COMPLETE":
            raise SystemExit(f"run {index}: delete ended {status}")
    finally:
        emulator.close()
        if not keep_home:
            SupervisorClient().stop_all(grace=1.0)
    return breakdown(poll, started, finished, delete, record, read_stamps(Path(f"{journal}.stamps")), launched)


def launch_times(record: Any, invocations: Path) -> dict[tuple[str, str], float]:
    """(service, role) -> when the executor began launching its command (the invocation's `started`)."""
    assert record.run is not None
    found = {}
    for stage_index, stage in enumerate(record.run["phases"][0]["stages"]):
        for step_index, step in enumerate(stage["steps"]):
            entry = record.run["steps"].get(f"s0.{stage_index}.{step_index}") or {}
            if step["kind"] == "service" and entry.get("invocation"):
                doc = json.loads((invocations / f"{entry['invocation']}.json").read_text())
                found[(step["name"], str(step["role"]))] = float(doc["started"])
    return found


def breakdown(poll: str, started: float, finished: float, delete: float, record: Any, stamps: list[Stamp],
              launched: dict[tuple[str, str], float]) -> Run:
    """The critical path from the stamps and every gap around it, from the record's own journal."""
    assert record.run is not None
    actions = {entry["action"]: float(entry["at"]) for entry in record.journal if "action" in entry}
    collected = [entry for entry in record.journal if "service" in entry]
    groups = []
    for label, service, role in GROUPS:
        members = [s for s in stamps if s.service == service and (role is None or s.role == role)]
        if not members or any(s.code != 0 for s in members):
            raise SystemExit(f"group {label}: stamps {members}")
        name = "custom_metadata" if service == "token" else service
        seen = [float(e["at"]) for e in collected if e["service"] == name and (role is None or e["role"] == role)]
        launching = min(at for (service_name, step_role), at in launched.items()
                        if service_name == name and (role is None or step_role == role))
        groups.append((label, members, max(seen), launching))
    slowest = {label: max(s.end - s.begin for s in members) for label, members, _, _ in groups}
    parts: dict[str, float] = {
        "before the walk (emulator, package check, record)": float(record.run["began"]) - started,
        "node creation (dirs, metad under the supervisor)": actions["register-metadata"] - actions["create-resources"],
        "metadata published (register-metadata, start-confd)": groups[0][3] - actions["register-metadata"],
    }
    parts["walk start to create-resources"] = actions["create-resources"] - float(record.run["began"])
    detect = checkpoints = launch = skew = 0.0
    for position, (label, members, seen_at, launching) in enumerate(groups):
        first, last = min(s.begin for s in members), max(s.end for s in members)
        skew += (last - first) - slowest[label]
        detect += seen_at - last
        launch += first - launching
        if position:
            checkpoints += launching - groups[position - 1][2]
    parts["node skew within groups (launch spread)"] = skew
    parts["end seen by the executor (poll back-off)"] = detect
    parts["end seen -> next launch (results, checkpoints)"] = checkpoints
    parts["launch -> first command's begin stamp"] = launch
    parts["after the last group (health agent, response, stack)"] = finished - groups[-1][2]
    critical = sum(slowest.values())
    total = finished - started
    parts["(check: parts + critical path - total)"] = sum(parts.values()) + critical - total
    return Run(poll, total, delete, critical, parts, slowest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per poll setting (interleaved)")
    parser.add_argument("--poll-intervals", default="default",
                        help=f"comma-separated {POLL_ENV} values; 'default' leaves it unset (5 s)")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds each service command sleeps (env.delay)")
    parser.add_argument("--keep-home", action="store_true",
                        help="one CRHELPER_HOME for every run: its supervisor daemon is already up after the first")
    args = parser.parse_args()
    settings = [value.strip() for value in args.poll_intervals.split(",") if value.strip()]
    for name in ("CRHELPER_SUPERVISOR_POLL", "CRHELPER_SUPERVISOR_GRACE", "CRHELPER_APPCENTER_STEP_BUDGET",
                 "CRHELPER_APPCENTER_HEALTH_INTERVAL"):
        os.environ.pop(name, None)  # embedded defaults for everything else
    from handlers.appcenter.settings import AppCenterSettings
    from crhelper.local.supervisor import SupervisorSettings
    defaults, supervisor = AppCenterSettings(), SupervisorSettings()
    print(f"5-node local cluster (1 store + {WEB_NODES} web), each service command sleeps {args.delay:g} s first; "
          f"{args.runs} run(s) per setting, interleaved; "
          + ("one CRHELPER_HOME for all runs (warm supervisor daemon)" if args.keep_home else "fresh CRHELPER_HOME per run"))
    print(f"settings: {POLL_ENV} in {settings} (default {defaults.poll_interval:g} s), step budget "
          f"{defaults.step_budget:g} s, supervisor poll {supervisor.poll:g} s (defaults); load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="appcenter-bench-") as tmp:
        root = Path(tmp)
        package = bench_package(root)
        index = 0
        try:
            for _ in range(args.runs):
                for poll in settings:
                    with open(root / "stderr.log", "a") as log, contextlib.redirect_stderr(log):  # the default JSON logs
                        runs.append(one_run(root, package, index, poll, args.delay, args.keep_home))
                    index += 1
                    last = runs[-1]
                    print(f"  run {index:2d}  poll {poll:>7}  create {last.total:.2f} s  critical path {last.critical:.2f} s"
                          f"  ratio {last.total / last.critical:.2f}  delete {last.delete:.2f} s", flush=True)
        finally:
            if args.keep_home:
                from crhelper.local.supervisor import SupervisorClient
                SupervisorClient().stop_all(grace=1.0)
    verdicts = []
    for poll in settings:
        mine = [run for run in runs if run.setting == poll]
        totals, criticals = [r.total for r in mine], [r.critical for r in mine]
        limits = [1.15 * r.critical + 0.5 for r in mine]
        margins = [r.total - limit for r, limit in zip(mine, limits)]
        print(f"\npoll interval {poll}: create time vs critical path (s), {len(mine)} runs")
        print(table(["", "median", "min", "max"], [
            ["create (CREATE_IN_PROGRESS -> COMPLETE)", *(f"{f(totals):.2f}" for f in (median, min, max))],
            ["critical path (sum of slowest per group)", *(f"{f(criticals):.2f}" for f in (median, min, max))],
            ["target 1.15 x critical + 0.5", *(f"{f(limits):.2f}" for f in (median, min, max))],
            ["create / critical", *(f"{f([r.total / r.critical for r in mine]):.2f}" for f in (median, min, max))],
            ["delete (for information)", *(f"{f([r.delete for r in mine]):.2f}" for f in (median, min, max))],
        ]))
        print(table(["slowest command per group (s)", "median", "min", "max"],
                    [[label, *(f"{f([r.slowest[label] for r in mine]):.3f}" for f in (median, min, max))]
                     for label, _, _ in GROUPS]))
        print(table(["where the rest goes (s)", "median", "min", "max"],
                    [[part, *(f"{f([r.parts[part] for r in mine]):.3f}" for f in (median, min, max))]
                     for part in mine[0].parts]))
        verdicts.append(Verdict(f"poll {poll}: median create - (1.15 x critical path + 0.5 s), s", median(margins), 0.0,
                                higher_is_better=False,
                                note=f"median create {median(totals):.2f} s vs critical path {median(criticals):.2f} s"))
    print("\npeer: none (no other tool deploys AppCenter packages locally)")
    for verdict in verdicts:
        print(verdict.line())
    return 0 if all(verdict.passed for verdict in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
