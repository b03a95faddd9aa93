"""Boot-group start (issue 12): 3 tiers, each one InstanceGroup of 10 `Custom::LocalInstance`
processes that listen 1 s after they are spawned, started by a `Custom::InstanceBootGroup` through
the local ROS and the local Function Compute endpoint (FC 2.0 ServiceToken, a worker per
invocation, the instances under the supervisor daemon), gated by a PortCheck per group, with
InitialDelaySeconds 0 and a 0.1 s poll interval.

    python bench/bootgroups.py [--pairs 3] [--listen-delay 1.0] [--poll 0.1] [--step-seconds 1.0]

1. Each start against the ideal: the sum over tiers of the slowest instance's spawn-to-listening
   time, as the instances record it (`bench/_bootgroup_instance.py`). Target: the start's total
   (the engine's run as stored: the handler beginning it to the last tier ready) within 10 % of the
   ideal. The same start as ROS sees it (the resource's UPDATE_IN_PROGRESS to UPDATE_COMPLETE: FC
   worker start, provider import and the response included) is printed beside it, and where the
   time goes per tier (start calls and spawns, detection, the gaps around the tiers).
2. Against a naive one-by-one start in the same run (start an instance through the same supervisor,
   poll its port every `--poll` s, then the next), interleaved: ours, naive, ours, naive, ...
3. The same start with InProgress steps: `CRHELPER_BOOTGROUP_STEP_SECONDS` small, so the start spans
   several FC invocations (each continuation a delayed async self-invocation; FC 2.0 delays are whole
   seconds). Reports the invocations and, per tier boundary, the time from a tier's readiness to the
   next tier's first start.

Every start is a stack update DesiredState Stopped -> Running (the stack is created Stopped, so all
starts take the same path). The stack is deleted at the end and the supervisor must list nothing;
any failed run exits 2 with the reason, a missed target exits 1. `--check-concurrency` defaults to
the provider's 10.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _stats import Verdict, median, ratio, table  # noqa: E402

TOKEN = "acs:fc:cn-hangzhou:123456789:services/bench-bootgroups/functions/provider"
#: The instances' registrations are not measured: an FC 3.0 token, which the local ROS runs in
#: process, keeps 30 worker start-ups out of the create and the delete.
INSTANCE_TOKEN = "acs:fc:cn-hangzhou:123456789:functions/bench-local-instances"
PROVIDER_SPEC = "handlers.bootgroups.provider:provider"
INSTANCE_PROGRAM = REPO / "bench" / "_bootgroup_instance.py"
GROUP = "Tiers"
TIERS, PER_TIER = 3, 10
OVERHEAD_TARGET = 0.10
#: The provider's default CRHELPER_BOOTGROUP_CHECK_CONCURRENCY. (This bench found the supervisor
#: daemon's listen backlog of 5 refusing bursts of connects with EAGAIN; it is 128 now, and clients
#: wait for room.)
SAFE_CONCURRENCY = 10
#: Seconds a naive start waits for one port before it calls the run failed.
NAIVE_PORT_TIMEOUT = 15.0


class BenchFailure(RuntimeError):
    """A run did not do what it should (a tier never ready, a stack operation failed): exit 2."""


# --- the stack -----------------------------------------------------------------------------------

def instance_name(tier: int, index: int) -> str:
    return f"T{tier}I{index}"


def template(prefix: str, port: int, listen_delay: float, times_dir: str, max_retries: int) -> str:
    """30 LocalInstances (tier t, instance i on <prefix>.<10t+i+1>:<port>) and the boot group: one
    InstanceGroup member per tier with a PortCheck its instances inherit."""
    resources: dict[str, Any] = {}
    members = []
    for tier in range(TIERS):
        refs = []
        for index in range(PER_TIER):
            name = instance_name(tier, index)
            resources[name] = {"Type": "Custom::LocalInstance", "Properties": {
                "ServiceToken": INSTANCE_TOKEN, "Timeout": 60, "Parameters": {
                    "Command": [sys.executable, "-I", "-S", str(INSTANCE_PROGRAM)],
                    "Host": f"{prefix}.{tier * PER_TIER + index + 1}", "Ports": [port],
                    "Environment": {"BENCH_LISTEN_DELAY": repr(listen_delay), "BENCH_TIMES_DIR": times_dir}}}}
            refs.append({"Ref": name})
        members.append({"InstanceGroup": {"Name": f"tier{tier}", "Instances": refs}, "BootOrder": tier,
                        "ReadinessRules": [{"Type": "PortCheck", "Name": f"tier{tier}-port", "Details": {"port": port}}]})
    resources[GROUP] = {"Type": "Custom::InstanceBootGroup", "Properties": {
        "ServiceToken": TOKEN, "Timeout": 120, "Parameters": {
            "Name": {"Fn::Sub": "${ALIYUN::StackName}-tiers"}, "DesiredState": {"Ref": "DesiredState"},
            # A refused connect is an attempt (one per poll round): allow several times the rounds
            # the listen delay takes, so a tier that never listens halts within seconds.
            "Settings": {"InitialDelaySeconds": 0, "ReadinessTimeoutSeconds": 1, "MaxRetryAttempts": max_retries},
            "Members": members}}}
    return json.dumps({"ROSTemplateFormatVersion": "2015-09-01",
                       "Parameters": {"DesiredState": {"Type": "String", "Default": "Stopped",
                                                       "AllowedValues": ["Running", "Stopped"]}},
                       "Resources": resources})


@dataclasses.dataclass
class Operation:
    """One stack operation as the bench saw it: when the group's events arrived, and the FC
    invocations of that operation's endpoint (start, end) in wall-clock seconds."""

    status: str
    group_events: list[tuple[float, str]]
    invocations: list[tuple[float, float]]

    def group_span(self) -> tuple[float, float]:
        """When the group resource went IN_PROGRESS and COMPLETE, as ROS saw it."""
        began = next(at for at, status in self.group_events if status.endswith("_IN_PROGRESS"))
        ended = next(at for at, status in self.group_events if status.endswith("_COMPLETE"))
        return began, ended


class Stack:
    """The bench stack on a StackEmulator; every operation gets its own StackDelivery (and so its
    own local FC endpoint, whose journal counts that operation's invocations)."""

    def __init__(self, home: str, name: str, environment: dict[str, str]) -> None:
        from crhelper.emulator import StackEmulator

        self.emulator = StackEmulator(home)
        self.name = name
        self.environment = environment

    def _run(self, call: Callable[[Any, Callable[[Any], None]], Any], extra_env: dict[str, str] | None = None,
             ) -> Operation:
        from crhelper.emulator.delivery import StackDelivery
        from crhelper.emulator.delivery_bindings import Bindings

        bindings = Bindings(providers={TOKEN: PROVIDER_SPEC, INSTANCE_TOKEN: PROVIDER_SPEC}, mode="endpoints",
                            environment={**self.environment, **(extra_env or {})})
        group_events: list[tuple[float, str]] = []
        reasons: list[str] = []

        def on_event(event: Any) -> None:
            if event.logical_id == GROUP:
                group_events.append((time.time(), event.status))
            if event.status.endswith("_FAILED") and event.reason:
                reasons.append(f"{event.logical_id}: {event.reason}")

        with StackDelivery(bindings) as deliver:
            description = call(deliver, on_event)
            if not deliver.fc.fc.wait_idle(30):  # the last invocation answers before its worker ends
                raise BenchFailure("the local FC endpoint still ran invocations 30 s after the operation ended")
            invocations = [(record.attempts[0].started, record.attempts[-1].ended)
                           for record in deliver.fc.fc.records if record.attempts]
        if not description.status.endswith("_COMPLETE") or "ROLLBACK" in description.status:
            raise BenchFailure(f"stack {description.status}: {'; '.join(reasons) or description.status_reason}")
        return Operation(description.status, group_events, invocations)

    def create(self, template_text: str) -> Operation:
        return self._run(lambda deliver, on_event: self.emulator.create(
            self.name, template_text, {"DesiredState": "Stopped"}, deliver, on_event=on_event, disable_rollback=True))

    def set_state(self, desired: str, extra_env: dict[str, str] | None = None) -> Operation:
        return self._run(lambda deliver, on_event: self.emulator.update(
            self.name, None, {"DesiredState": desired}, deliver, on_event=on_event, disable_rollback=True), extra_env)

    def delete(self) -> Operation:
        return self._run(lambda deliver, on_event: self.emulator.delete(self.name, deliver, on_event=on_event))

    def close(self) -> None:
        self.emulator.close()


# --- what the instances recorded -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Boot:
    """One start of one instance, by its own clocks (wall seconds)."""

    instance: str
    spawned: float
    listening: float

    @property
    def seconds(self) -> float:
        return self.listening - self.spawned


def boots_since(times_dir: Path, since: float) -> dict[str, Boot]:
    """Each instance's first start spawned at or after `since`."""
    found: dict[str, Boot] = {}
    for path in sorted(times_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["spawned_wall"] >= since and record["instance"] not in found:
                found[record["instance"]] = Boot(record["instance"], record["spawned_wall"], record["listening_wall"])
    return found


# --- analysis (pure) -----------------------------------------------------------------------------

@dataclasses.dataclass
class TierTimes:
    """One tier of a start: opened (engine), its instances' boots, ready (engine), next tier opened."""

    order: int
    opened: float
    first_start_call: float
    ready: float
    boots: list[Boot]

    @property
    def ideal(self) -> float:
        return max(boot.seconds for boot in self.boots)

    @property
    def last_listening(self) -> float:
        return max(boot.listening for boot in self.boots)

    @property
    def first_spawn(self) -> float:
        """The tier opened to its first instance spawned."""
        return min(boot.spawned for boot in self.boots) - self.opened

    @property
    def spawn_spread(self) -> float:
        """First to last instance spawned (the start calls run `check_concurrency` at once)."""
        return max(boot.spawned for boot in self.boots) - min(boot.spawned for boot in self.boots)

    @property
    def launch(self) -> float:
        """How much later than the tier's opening the critical path effectively began: the start
        calls, the spawns' spread and any instance slower than the slowest's spawn-to-listening."""
        return self.last_listening - self.opened - self.ideal

    @property
    def detect(self) -> float:
        """The last instance listening to the tier read ready (poll granularity, check rounds)."""
        return self.ready - self.last_listening


@dataclasses.dataclass
class StartTimes:
    """One boot-group start, from the engine's stored run and the instances' records."""

    began: float
    ended: float
    tiers: list[TierTimes]
    ros_began: float
    ros_ended: float
    invocations: list[tuple[float, float]]

    @property
    def ros_seconds(self) -> float:
        return self.ros_ended - self.ros_began

    @property
    def total(self) -> float:
        return self.ended - self.began

    @property
    def ideal(self) -> float:
        return sum(tier.ideal for tier in self.tiers)

    @property
    def overhead(self) -> float:
        return ratio(self.total - self.ideal, self.ideal)

    def boundaries(self) -> list[tuple[float, float]]:
        """Per tier boundary: (tier k ready -> tier k+1's first start call, by the engine's timeline;
        tier k's last instance listening -> tier k+1's first instance spawned, by the instances)."""
        out = []
        for tier, after in zip(self.tiers, self.tiers[1:]):
            first_spawn = min(boot.spawned for boot in after.boots)
            out.append((after.first_start_call - tier.ready, first_spawn - tier.last_listening))
        return out


def start_times(run: Any, boots: dict[str, Boot], operation: Operation) -> StartTimes:
    """Join the engine's run (tiers, timeline) with the instances' own records; BenchFailure when the
    start did not finish ok or an instance recorded no boot."""
    from handlers.bootgroups import events as ev

    if not run.finished or not run.ok or run.start is None:
        raise BenchFailure(f"the start did not finish ok: {run.reason or 'unfinished'}")
    tiers = []
    for tier in run.start.tiers:
        starts = [e.at for e in run.timeline if e.kind == ev.VM_START and e.order == tier.order]
        missing = [vm.vm for vm in tier.vms if vm.vm not in boots]
        if missing or not starts or tier.ended is None or tier.began is None:
            raise BenchFailure(f"tier order {tier.order}: no boot recorded by {', '.join(missing) or 'the engine'}")
        tiers.append(TierTimes(tier.order, tier.began, min(starts), tier.ended, [boots[vm.vm] for vm in tier.vms]))
    assert run.ended is not None
    return StartTimes(run.began, run.ended, tiers, *operation.group_span(), operation.invocations)


# --- the runs ------------------------------------------------------------------------------------

def ours(stack: Stack, times_dir: Path, extra_env: dict[str, str] | None = None) -> StartTimes:
    """One boot-group start (stack update to Running), measured, then stopped again."""
    from handlers.bootgroups import engine
    from handlers.bootgroups.state import SqliteGroupStore, default_path

    since = time.time()
    operation = stack.set_state("Running", extra_env)
    (group,) = SqliteGroupStore(default_path()).list_groups()
    run = engine.load_run(group.run)
    measured = start_times(run, boots_since(times_dir, since), operation)
    stack.set_state("Stopped")
    return measured


@dataclasses.dataclass
class NaiveTimes:
    total: float
    ideal: float


def naive(times_dir: Path, poll: float) -> NaiveTimes:
    """Start each instance through the same supervisor as the boot group, poll its port every
    `poll` s until it accepts, then the next; stop them all afterwards."""
    from handlers.bootgroups import probes
    from handlers.bootgroups.backend_local import LocalBackend
    from handlers.bootgroups.state import SqliteGroupStore, default_path

    store = SqliteGroupStore(default_path())
    (group,) = store.list_groups()
    order = [vm for member in sorted(group.members, key=lambda m: m.order)
             for vm in (member.group.instances if member.group else None) or []]
    backend = LocalBackend(store)
    since = time.time()
    began = time.monotonic()
    try:
        for vm in order:
            record = store.get_instance(vm)
            assert record is not None
            backend.start_vm(vm)
            deadline = time.monotonic() + NAIVE_PORT_TIMEOUT
            while probes.tcp_probe(record.host, record.ports[0], 1.0).status != "Ready":
                if time.monotonic() >= deadline:
                    raise BenchFailure(f"naive start: {vm} ({record.host}:{record.ports[0]}) did not listen within "
                                       f"{NAIVE_PORT_TIMEOUT:g} s")
                time.sleep(poll)
        total = time.monotonic() - began
    finally:
        for vm in order:
            backend.stop_vm(vm, False)
    boots = boots_since(times_dir, since)
    missing = [vm for vm in order if vm not in boots]
    if missing:
        raise BenchFailure(f"naive start: no boot recorded by {', '.join(missing)}")
    return NaiveTimes(total, sum(boots[vm].seconds for vm in order))


# --- report --------------------------------------------------------------------------------------

def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def start_rows(label: str, start: StartTimes) -> list[str]:
    return [label, f"{start.total:.3f}", f"{start.ideal:.3f}", f"{start.overhead * 100:+.1f}%",
            f"{start.ros_seconds:.3f}", f"{ratio(start.ros_seconds - start.ideal, start.ideal) * 100:+.1f}%",
            str(len(start.invocations))]


def tier_rows(label: str, start: StartTimes) -> list[list[str]]:
    rows = []
    for tier in start.tiers:
        rows.append([f"{label} order {tier.order}", ms(tier.ready - tier.opened), ms(tier.ideal),
                     ms(tier.first_spawn), ms(tier.spawn_spread), ms(tier.launch), ms(tier.detect)])
    rows.append([f"{label} run began -> tier opened", ms(start.tiers[0].opened - start.began), "", "", "", "", ""])
    for tier, after in zip(start.tiers, start.tiers[1:]):
        rows.append([f"{label} ready -> order {after.order} opened", ms(after.opened - tier.ready), "", "", "", "", ""])
    rows.append([f"{label} last ready -> run ended", ms(start.ended - start.tiers[-1].ready), "", "", "", "", ""])
    rows.append([f"{label} ROS -> run began", ms(start.began - start.ros_began), "", "", "", "", ""])
    rows.append([f"{label} run ended -> ROS", ms(start.ros_ended - start.ended), "", "", "", "", ""])
    return rows


def machine() -> str:
    import platform

    load = os.getloadavg()
    return (f"machine: nproc={os.cpu_count()}, Python {platform.python_version()}, {platform.system()} "
            f"{platform.release()}; load average {load[0]:.2f}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def report(pairs: list[tuple[StartTimes, NaiveTimes]], stepped: StartTimes, step_seconds: float) -> list[Verdict]:
    headers = ["start", "total s", "ideal s", "overhead", "as ROS saw it s", "ROS overhead", "FC invocations"]
    rows = []
    for index, (start, plain) in enumerate(pairs, 1):
        rows.append(start_rows(f"ours #{index}", start))
        rows.append([f"naive #{index}", f"{plain.total:.3f}", f"{plain.ideal:.3f}",
                     f"{ratio(plain.total - plain.ideal, plain.ideal) * 100:+.1f}%", "", "", "-"])
    rows.append(start_rows(f"ours, {step_seconds:g} s steps", stepped))
    print(table(headers, rows))
    print()
    print("where the time goes (ms): tier = opened -> ready = ideal + launch + detect; ideal = slowest spawn-to-listening;")
    print("1st spawn = opened -> first instance spawned; spread = first -> last spawned; launch = last listening - opened")
    print("- ideal; detect = last listening -> tier ready. ROS -> run began: FC worker start, provider import, validation;")
    print("run ended -> ROS: storing, the response and ROS seeing it")
    tier_table = []
    for index, (start, _plain) in enumerate(pairs, 1):
        tier_table.extend(tier_rows(f"ours #{index}", start))
    tier_table.extend(tier_rows(f"{step_seconds:g} s steps", stepped))
    print(table(["tier", "tier", "ideal", "1st spawn", "spread", "launch", "detect"], tier_table))
    print()
    print(f"InProgress steps ({step_seconds:g} s per invocation): {len(stepped.invocations)} FC invocations")
    origin = stepped.began
    for number, (began, ended) in enumerate(stepped.invocations, 1):
        print(f"  invocation {number}: {began - origin:+.3f} s .. {ended - origin:+.3f} s (run began at 0)")
    for number, (engine_gap, instance_gap) in enumerate(stepped.boundaries(), 1):
        print(f"  boundary tier {number} -> {number + 1}: tier ready -> next tier's first start {ms(engine_gap)} ms "
              f"(engine timeline); last listening -> next first spawned {ms(instance_gap)} ms (instances)")
    print()
    ours_totals = [start.total for start, _ in pairs]
    naive_totals = [plain.total for _, plain in pairs]
    ros_totals = [start.ros_seconds for start, _ in pairs]
    speedups = [ratio(plain.total, start.total) for start, plain in pairs]
    print(f"naive / ours per pair: {', '.join(f'{s:.2f}x' for s in speedups)}; median naive {median(naive_totals):.3f} s "
          f"/ median ours {median(ours_totals):.3f} s = {ratio(median(naive_totals), median(ours_totals)):.2f}x "
          f"(as ROS saw ours: {ratio(median(naive_totals), median(ros_totals)):.2f}x)")
    worst = max(start.overhead for start, _ in pairs)
    verdicts = [
        Verdict("start overhead over the ideal, worst of the runs (fraction)", worst, OVERHEAD_TARGET, False,
                note=f"median {median([s.overhead for s, _ in pairs]):.3f}; as ROS saw it (FC worker start, provider "
                     f"import, response): median {median([ratio(s.ros_seconds - s.ideal, s.ideal) for s, _ in pairs]):.3f}"),
        Verdict("naive one-by-one / ours, worst pair", min(speedups), 1.0, True, strict=True),
    ]
    for verdict in verdicts:
        print(verdict.line())
    return verdicts


# --- main ----------------------------------------------------------------------------------------

def environment(poll: float, concurrency: int) -> dict[str, str]:
    """What the FC functions (and so the supervisor daemon they start) and this process run with."""
    return {"CRHELPER_BOOTGROUP_POLL_INTERVAL": repr(poll), "CRHELPER_BOOTGROUP_CHECK_CONCURRENCY": str(concurrency),
            "CRHELPER_SUPERVISOR_GRACE": "2",
            "CRHELPER_SUPERVISOR_LINGER": "120", "CRHELPER_LOG_LEVEL": "WARNING"}


def warm_supervisor(home: str) -> float:
    """Launch the home's supervisor daemon before the measured starts (seconds it took): a deployed
    daemon is up already; the first start on a fresh home pays this once."""
    from crhelper.local.supervisor import SupervisorClient

    client = SupervisorClient(home)
    began = time.monotonic()
    client.start("bench-warm-up", [sys.executable, "-I", "-S", "-c", "pass"])
    took = time.monotonic() - began
    client.stop("bench-warm-up", forget=True)
    return took


def leftovers(home: str) -> list[str]:
    """What the supervisor still lists after the stack's delete (it must list nothing); then its
    daemon is stopped, and must be gone."""
    from crhelper.local.supervisor import SupervisorClient

    client = SupervisorClient(home)
    left = [f"{s.name} ({s.state}, pid {s.pid})" for s in client.list()]
    client.stop_all(grace=0.5)
    deadline = time.monotonic() + 10
    while client.daemon_pid() is not None:
        if time.monotonic() >= deadline:
            left.append(f"the supervisor daemon (pid {client.daemon_pid()})")
            break
        time.sleep(0.1)
    return left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3, help="interleaved ours/naive pairs (at least 3)")
    parser.add_argument("--listen-delay", type=float, default=1.0)
    parser.add_argument("--poll", type=float, default=0.1, help="CRHELPER_BOOTGROUP_POLL_INTERVAL and the naive poll")
    parser.add_argument("--step-seconds", type=float, default=1.0, help="CRHELPER_BOOTGROUP_STEP_SECONDS of the stepped run")
    parser.add_argument("--check-concurrency", type=int, default=SAFE_CONCURRENCY,
                        help="CRHELPER_BOOTGROUP_CHECK_CONCURRENCY (the provider's default: 10)")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    bench_began = time.monotonic()
    home = tempfile.mkdtemp(prefix="crhelper-bootgroup-bench-")
    times_dir = Path(home) / "times"
    times_dir.mkdir()
    env = environment(args.poll, args.check_concurrency)
    os.environ.update(env)
    os.environ["CRHELPER_HOME"] = home
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    prefix = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    port = random.randint(20000, 40000)
    max_retries = math.ceil(args.listen_delay / args.poll) * 4 + 10
    print(machine())
    print(f"{TIERS} tiers x InstanceGroup of {PER_TIER} Custom::LocalInstance on {prefix}.1-{TIERS * PER_TIER}:{port}, "
          f"listen {args.listen_delay:g} s after spawn, PortCheck per group, InitialDelaySeconds 0, poll {args.poll:g} s, "
          f"MaxRetryAttempts {max_retries}, check concurrency {args.check_concurrency}; FC 2.0 token on the local FC endpoint; home {home}")
    stack = Stack(home, "bench-bootgroups", env)
    created = False
    status = 0
    left: list[str] = []
    try:
        stack.create(template(prefix, port, args.listen_delay, str(times_dir), max_retries))
        created = True
        print(f"[warm-up] supervisor daemon launched in {warm_supervisor(home):.3f} s (not part of any start)", flush=True)
        pairs = []
        for number in range(1, args.pairs + 1):
            start = ours(stack, times_dir)
            plain = naive(times_dir, args.poll)
            print(f"[pair {number}] ours {start.total:.3f} s (ideal {start.ideal:.3f} s, ROS saw {start.ros_seconds:.3f} s), "
                  f"naive {plain.total:.3f} s", flush=True)
            pairs.append((start, plain))
        stepped = ours(stack, times_dir, {"CRHELPER_BOOTGROUP_STEP_SECONDS": repr(args.step_seconds)})
        print(f"[steps] ours {stepped.total:.3f} s over {len(stepped.invocations)} invocations", flush=True)
        print()
        verdicts = report(pairs, stepped, args.step_seconds)
        status = 0 if all(v.passed for v in verdicts) else 1
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        status = 2
    finally:
        try:
            if created:
                stack.delete()
        except BenchFailure as exc:
            print(f"FAILED to delete the bench stack: {exc}", file=sys.stderr)
            status = 2
        finally:
            stack.close()
            left = leftovers(home)
            if left:
                print(f"FAILED: the supervisor still listed after the stack's delete (now stopped): {', '.join(left)}",
                      file=sys.stderr)
                status = 2
    if status == 2:
        print(f"the bench's home is kept for a look: {home}", file=sys.stderr)
    else:
        shutil.rmtree(home, ignore_errors=True)
    print(f"\nsupervisor after the stack's delete: {'empty' if not left else f'{len(left)} left listed'}; "
          f"load average now {os.getloadavg()[0]:.2f}; total bench time {time.monotonic() - bench_began:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
