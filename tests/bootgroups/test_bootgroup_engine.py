"""Spec §4 on a drivable clock: test cases 2-9, the Marvin start/reboot/stop scenario, the JSON
round-trip resume and the concurrency bound."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bootgroup_fakes import FakeBackend, budget, drive, members_of, new_run
from crhelper.operations import ManualClock
from handlers.bootgroups import events as ev
from handlers.bootgroups.engine import (
    HALTED, SKIPPED, advance, dump_run, load_run, member_readiness, power_changes, tier_summary,
)
from handlers.bootgroups.readiness import restarted_outside
from handlers.bootgroups.settings import GroupSettings


def vm(name: str, order: int, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"Instance": name, "BootOrder": order, "ReadinessRules": list(rules)}


def port(number: int) -> dict[str, Any]:
    return {"Type": "PortCheck", "Details": {"port": number}}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def start_times(backend: FakeBackend) -> dict[str, float]:
    return {name: vm.last_power_change for name, vm in backend.vms.items() if vm.last_power_change is not None}


def test_orders_0_0_2_start_in_two_tiers_and_stop_in_reverse(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    for name in ("db1", "db2", "web"):
        backend.add(name, ready_after=45)
    members = members_of({"Members": [vm("db1", 0, port(5432)), vm("db2", 0, port(5432)), vm("web", 2, port(80))]})
    run, outcome, _ = drive(new_run("start", members, clock), backend, clock)
    assert outcome.ok and [t["Members"] for t in tier_summary(run)] == [["db1", "db2"], ["web"]]
    starts = start_times(backend)
    assert starts["db1"] == starts["db2"] == run.began
    # web starts only once both databases were Ready: delay 30, first check refused, Ready at the poll after 45 s
    assert starts["web"] == run.began + 50
    backend.calls.clear()
    drive(new_run("stop", members, clock), backend, clock)
    assert [call[1] for call in backend.calls if call[0] == "stop"] == ["web", "db1", "db2"]


def test_an_already_running_vm_is_not_restarted_and_waits_what_is_left_of_the_delay(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("fresh", state="Running", last_power_change=clock.now() - 12)
    backend.add("old", state="Running", last_power_change=clock.now() - 3600)
    members = members_of({"Members": [vm("fresh", 0, port(1)), vm("old", 0, port(1))]})
    run, outcome, _ = drive(new_run("start", members, clock, poll=1), backend, clock)
    assert outcome.ok and backend.count("start") == 0
    first = {name: backend.check_calls(name)[0][5] - run.began for name in ("fresh", "old")}
    assert first == {"fresh": 18.0, "old": 0.0}
    assert [e.kind for e in run.timeline if e.subject == "fresh"][:1] == [ev.VM_RUNNING]


def test_an_always_not_ready_member_gets_n_plus_1_evaluations_then_halts(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=None)
    backend.add("web")
    members = members_of({"Members": [vm("db", 0, port(5432)), vm("web", 1)]})
    run, outcome, _ = drive(new_run("start", members, clock, settings=GroupSettings(max_retries=3)), backend, clock)
    assert not outcome.ok and len(backend.check_calls("db")) == 4 and backend.count("reboot") == 0
    assert outcome.reason is not None
    assert outcome.reason.startswith("tier 1 of 2 (order 0): Instance 'db' is not Ready after 4 attempt(s): "
                                     "PortCheck 'PortCheck-VirtualMachine-db' (port 5432): Error: connection refused by db:5432 (attempt 4/4)")
    assert "no rollback" in outcome.reason
    assert backend.count("start", "web") == 0 and backend.count("stop") == 0     # halted, nothing stopped
    assert [t.status for t in run.start.tiers] == [HALTED, SKIPPED]  # type: ignore[union-attr]
    assert run.events[-1].type == ev.START and not run.events[-1].ok


def test_reboot_on_retry_reboots_n_times_each_followed_by_the_delay(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=None)
    settings = GroupSettings(max_retries=2, initial_delay=30, reboot_on_retry=True)
    run, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0, port(1))]}), clock, settings=settings, poll=5),
                            backend, clock)
    checks = [call[5] - run.began for call in backend.check_calls()]
    reboots = [e.at - run.began for e in run.timeline if e.kind == ev.REBOOT_VM]
    assert not outcome.ok and backend.count("reboot") == 2 and len(checks) == 3
    assert checks == [30.0, 60.0, 90.0] and reboots == [30.0, 60.0]


def test_the_first_budget_is_timeout_minus_delay_and_later_ones_restart(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=45)
    drive(new_run("start", members_of({"Members": [vm("db", 0, port(1))]}), clock), backend, clock)
    assert [call[4] for call in backend.check_calls()] == [270.0, 290.0, 290.0]  # 300 − 30; then 300 − one poll


def test_a_booting_vm_uses_no_attempt_until_it_reads_running(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", boot_seconds=25, ready_after=0)
    settings = GroupSettings(max_retries=0, initial_delay=0)
    run, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0, port(1))]}), clock, settings=settings, poll=10),
                            backend, clock)
    assert outcome.ok and len(backend.check_calls()) == 1 and backend.check_calls()[0][5] - run.began == 30.0


def _group(name: str, instances: list[str], order: int, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"InstanceGroup": {"Name": name, "Instances": instances}, "BootOrder": order, "ReadinessRules": list(rules)}


def quorum(kind: str, value: Any) -> dict[str, Any]:
    return {"Type": "MemberQuorum", "Details": {"thresholdtype": kind, "thresholdvalue": value}}


def test_quorum_count_2_of_3_is_ready_while_the_third_retries(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("a"), backend.add("b"), backend.add("c", ready_after=None), backend.add("web")
    members = members_of({"Members": [_group("app", ["a", "b", "c"], 0, port(80), quorum("COUNT", 2)), vm("web", 1)]})
    run, outcome, _ = drive(new_run("start", members, clock), backend, clock)
    assert outcome.ok and len(backend.check_calls("c")) == 1     # c was no longer polled once the quorum was met
    assert backend.vms["web"].state == "Running"
    assert member_readiness(run) == {"app": "Ready", "web": "Ready"}


def test_quorum_75_percent_of_4_with_two_given_up_halts(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("a"), backend.add("b", ready_after=None), backend.add("c", ready_after=None), backend.add("d", ready_after=None)
    backend.vms["d"].boot_seconds = 10_000  # never Running within the run
    members = members_of({"Members": [_group("app", ["a", "b", "c", "d"], 0, port(80), quorum("PERCENTAGE", 75))]})
    _, outcome, _ = drive(new_run("start", members, clock, settings=GroupSettings(max_retries=1)), backend, clock)
    assert not outcome.ok and outcome.reason is not None
    assert "InstanceGroup 'app' is Error: MemberQuorum" in outcome.reason
    assert "no longer achievable: 2/4 gave up" in outcome.reason


def test_an_empty_group_is_not_ready_and_halts(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    _, outcome, _ = drive(new_run("start", members_of({"Members": [_group("app", [], 0)]}), clock), backend, clock)
    assert not outcome.ok and "InstanceGroup 'app' is NotReady: the instance group has no instances" in (outcome.reason or "")


def test_without_quorum_one_child_giving_up_halts_one_retrying_is_waited_for(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("a"), backend.add("b", ready_after=None)
    members = members_of({"Members": [_group("app", ["a", "b"], 0, port(80))]})
    _, outcome, _ = drive(new_run("start", members, clock, settings=GroupSettings(max_retries=2)), backend, clock)
    assert not outcome.ok and "InstanceGroup 'app' is Error" in (outcome.reason or "")
    assert "instance 'b' gave up" in (outcome.reason or "") and len(backend.check_calls("b")) == 3

    clock2 = ManualClock()
    slow = FakeBackend(clock2)
    slow.add("a"), slow.add("b", ready_after=55)  # Error at 30, 40, 50 s; Ready at 60 s, attempt 4 of 6
    _, outcome, _ = drive(new_run("start", members, clock2), slow, clock2)
    assert outcome.ok and len(slow.check_calls("b")) == 4


def test_a_hanging_check_reaches_the_tier_deadline_and_tier_0_keeps_running(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db"), backend.add("app", ready_after=None), backend.add("web")
    backend.check_cost["app"], backend.hang = 5_000.0, {"app"}   # ignores its budget
    members = members_of({"Members": [vm("db", 0), vm("app", 1, port(8080)), vm("web", 2)]})
    run, outcome, _ = drive(new_run("start", members, clock), backend, clock)
    assert not outcome.ok and outcome.reason is not None
    assert outcome.reason.startswith("tier 2 of 3 (order 1) was not ready within its deadline of 1,880.0 s")
    assert "Instance 'app' (instance 'app' after 1 attempt(s)" in outcome.reason
    assert backend.vms["db"].state == "Running" and backend.count("stop") == 0 and backend.count("start", "web") == 0


def test_a_start_failure_halts_naming_the_instance(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db"), backend.add("db2")
    backend.fail_start.add("db2")
    _, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0), vm("db2", 0)]}), clock), backend, clock)
    assert not outcome.ok and "instance 'db2' failed to start: RuntimeError: host capacity exhausted" in (outcome.reason or "")
    assert backend.vms["db"].state == "Running"


def test_a_stop_failure_in_tier_2_still_stops_tiers_1_and_0_and_is_reported(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    for name in ("db", "app", "web", "off"):
        backend.add(name, state="Running", last_power_change=clock.now())
    backend.vms["off"].state = "Stopped"
    backend.fail_stop.add("web")
    members = members_of({"Members": [vm("db", 0), vm("app", 1), vm("web", 2), vm("off", 1)]})
    run, outcome, _ = drive(new_run("stop", members, clock, forced=True), backend, clock, roundtrip=True, step_seconds=0)
    assert [call[1:] for call in backend.calls if call[0] == "stop"] == [("web", True), ("app", True), ("db", True)]
    assert backend.vms["db"].state == backend.vms["app"].state == "Stopped"
    assert not outcome.ok and outcome.reason is not None
    assert "1 of 4 instance(s) failed to stop: instance 'web' (order 2): RuntimeError: the host of web does not answer" in outcome.reason
    assert any(e.kind == ev.VM_STOP_SKIP and e.subject == "off" for e in run.timeline)


def test_marvin_two_tier_start_reboot_and_stop_end_states(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("vm1"), backend.add("vm2")
    members = members_of({"Members": [vm("vm1", 0), vm("vm2", 1)]})
    settings = GroupSettings(initial_delay=0)
    _, started, _ = drive(new_run("start", members, clock, settings=settings), backend, clock)
    assert started.ok and {v.state for v in backend.vms.values()} == {"Running"}
    backend.calls.clear()
    rebooted, outcome, _ = drive(new_run("reboot", members, clock, settings=settings), backend, clock)
    assert outcome.ok and [c[:2] for c in backend.calls if c[0] in ("stop", "start")] == [
        ("stop", "vm2"), ("stop", "vm1"), ("start", "vm1"), ("start", "vm2")]
    assert rebooted.events[-1].type == ev.REBOOT
    _, stopped, _ = drive(new_run("stop", members, clock), backend, clock)
    assert stopped.ok and {v.state for v in backend.vms.values()} == {"Stopped"}


def test_every_step_round_tripped_through_json_gives_the_same_run(clock: ManualClock) -> None:
    def scenario(roundtrip: bool) -> tuple[Any, FakeBackend, int]:
        clock = ManualClock()
        backend = FakeBackend(clock)
        backend.add("db", ready_after=55), backend.add("a"), backend.add("b", ready_after=None), backend.add("web")
        members = members_of({"Members": [vm("db", 0, port(5432)), _group("app", ["a", "b"], 1, port(80), quorum("COUNT", 1)),
                                          vm("web", 2)]})
        run, outcome, steps = drive(new_run("start", members, clock), backend, clock, step_seconds=0, roundtrip=roundtrip)
        assert outcome.ok
        return dump_run(run), backend, steps

    stored, backend, steps = scenario(roundtrip=True)
    direct, direct_backend, _ = scenario(roundtrip=False)
    assert stored == direct and steps > 8
    assert backend.calls == direct_backend.calls
    assert all(backend.count("start", name) == 1 for name in ("db", "a", "b", "web"))


def test_a_process_killed_between_steps_resumes_without_restarting_tier_0(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db"), backend.add("app", ready_after=35), backend.add("web")
    members = members_of({"Members": [vm("db", 0), vm("app", 1, port(8080)), vm("web", 2)]})
    stored = json.dumps(dump_run(new_run("start", members, clock)))
    lost_rounds = 0
    for _ in range(100):
        run = load_run(json.loads(stored))
        outcome = advance(run, backend, budget(clock, 0))
        if outcome.finished:
            break
        tier = run.start.tiers[run.start.current]  # type: ignore[union-attr]
        if tier.order == 1 and any(v.evaluations for v in tier.vms) and lost_rounds == 0:
            lost_rounds += 1   # the process dies before storing this step: its round is lost
        else:
            stored = json.dumps(dump_run(run))
        clock.advance(outcome.delay)
    assert outcome.ok and lost_rounds == 1
    assert backend.count("start", "db") == 1 and backend.count("start", "app") == 1
    final = run.start.tiers[1].vms[0]  # type: ignore[union-attr]
    # app (started at 30 s) was checked at 60 s: Error, lost with its process, so not counted; the resumed
    # round at 70 s is still its first attempt, with the budget left since the stored attempt start
    assert [(call[4], call[5] - run.began) for call in backend.check_calls("app")] == [(270.0, 60.0), (260.0, 70.0)]
    assert (final.evaluations, final.retries, final.ready) == (1, 0, True)
    assert "(attempt 1/6)" in final.message


def test_never_more_than_check_concurrency_calls_at_once(clock: ManualClock) -> None:
    backend = FakeBackend(clock, real_latency=0.02)
    names = [f"vm{n}" for n in range(12)]
    for name in names:
        backend.add(name)
    members = members_of({"Members": [_group("all", names, 0, port(80))]})
    _, outcome, _ = drive(new_run("start", members, clock, settings=GroupSettings(initial_delay=0), concurrency=3), backend, clock)
    assert outcome.ok and backend.max_in_flight == 3
    assert backend.count("start") == 12 and len(backend.check_calls()) == 12


def test_the_state_is_plain_json_and_the_timeline_reads_as_a_timeline(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=35)
    run, _, _ = drive(new_run("start", members_of({"Members": [vm("db", 0, port(5432))]}), clock), backend, clock)
    raw = dump_run(run)
    assert json.loads(json.dumps(raw)) == raw
    lines = [entry.line(run.began) for entry in run.timeline]
    assert lines[0].endswith("tier.start    tier 1 of 1 (order 0): db")
    assert any("check         db: Error (budget 270.0 s)" in line for line in lines)
    assert lines[-1].strip().startswith("40.00s done")


def test_the_checkpoint_sees_every_round_and_a_checkpointed_run_resumes(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=55), backend.add("web")
    members = members_of({"Members": [vm("db", 0, port(5432)), vm("web", 1)]})
    run = new_run("start", members, clock)
    saved: list[str] = []
    outcome = advance(run, backend, budget(clock, 45), checkpoint=lambda r: saved.append(json.dumps(dump_run(r))))
    assert not outcome.finished and len(saved) == 1 + 5   # tier opened, rounds at 0, 10, 20, 30, 40 s
    resumed = load_run(json.loads(saved[-1]))
    assert resumed.start.tiers[0].vms[0].retries == 2  # type: ignore[union-attr]  # Errors at 30 s and 40 s
    clock.advance(outcome.delay)
    final, outcome, _ = drive(resumed, backend, clock)
    assert outcome.ok and backend.count("start", "db") == 1


def test_a_restart_outside_the_group_is_told_from_the_groups_own_boot(clock: ManualClock) -> None:  # Marvin test 4
    backend = FakeBackend(clock)
    backend.add("db"), backend.add("web")
    run, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0), vm("web", 0)]}), clock), backend, clock)
    boots = power_changes(run)
    states = {name: backend.vm_state(name) for name in ("db", "web")}
    assert outcome.ok and restarted_outside(boots, states) == []
    clock.advance(100)
    backend.stop_vm("web", False)
    backend.start_vm("web")
    assert restarted_outside(boots, {name: backend.vm_state(name) for name in ("db", "web")}) == ["web"]


class _QueuedStarts(FakeBackend):
    """A backend whose start is accepted but acted on later (CloudStack's job queue): the VM keeps
    reading Stopped for `queue` seconds, then boots, unless its job is in `failing` (it stays
    Stopped); with `broken_reads`, reading a VM's state raises once its start was asked."""

    def __init__(self, clock: ManualClock, queue: float, *, failing: set[str] | None = None,
                 start_grace: float | None = None) -> None:
        super().__init__(clock)
        self.queue, self.failing, self.broken_reads = queue, failing or set(), False
        self.asked: dict[str, float] = {}
        if start_grace is not None:
            self.start_grace = start_grace

    def start_vm(self, vm: str) -> None:
        self._enter("start", vm)
        self._leave()
        self.asked.setdefault(vm, self.clock.now())

    def vm_state(self, vm: str) -> Any:
        if vm in self.asked and self.broken_reads:
            raise RuntimeError(f"job for {vm} failed: Insufficient capacity")
        found = self.vms[vm]
        asked = self.asked.get(vm)
        if asked is not None and vm not in self.failing and found.state == "Stopped" and self.clock.now() >= asked + self.queue:
            found.state, found.last_power_change = "Running", self.clock.now()
        return super().vm_state(vm)


def test_a_vm_that_reads_stopped_again_after_its_start_halts_only_after_the_grace(clock: ManualClock) -> None:
    settings = GroupSettings(max_retries=0, initial_delay=0, timeout=100)
    # Queued for 3 s (one poll of 1 s, grace max(2 polls, 5 s) = 5 s): it boots, no halt.
    backend = _QueuedStarts(clock, queue=3.0)
    backend.add("db")
    _, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0)]}), clock, settings=settings, poll=1.0),
                          backend, clock, roundtrip=True)
    assert outcome.ok, outcome.reason
    # Its job failed: still Stopped once the grace is over -> halt naming it, not the tier deadline.
    backend = _QueuedStarts(clock, queue=3.0, failing={"db"})
    backend.add("db"), backend.add("web")
    began = clock.now()
    run, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0), vm("web", 1)]}), clock,
                                    settings=settings, poll=1.0), backend, clock, roundtrip=True)
    reason = outcome.reason or ""
    assert not outcome.ok and "instance 'db' of Instance 'db' failed to start: it reads Stopped 5.0 s after" in reason
    assert "grace 5 s" in reason and "no rollback" in reason and "deadline" not in reason
    assert 5.0 <= clock.now() - began < 7.0 and backend.count("start", "web") == 0
    # A backend may give its own grace; 2 polls win over the 5 s floor when polls are long.
    backend = _QueuedStarts(clock, queue=0.0, failing={"db"}, start_grace=0.5)
    backend.add("db")
    _, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0)]}), clock, settings=settings, poll=1.0),
                          backend, clock)
    assert "it reads Stopped 1.0 s after its start was asked (grace 0.5 s" in (outcome.reason or "")
    backend = _QueuedStarts(clock, queue=0.0, failing={"db"})
    backend.add("db")
    _, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0)]}), clock, settings=settings, poll=4.0),
                          backend, clock)
    assert "it reads Stopped 8.0 s after its start was asked (grace 8 s" in (outcome.reason or "")


def test_an_error_reading_a_booting_vm_reads_failed_to_start(clock: ManualClock) -> None:
    backend = _QueuedStarts(clock, queue=60.0)
    backend.add("db")
    run = new_run("start", members_of({"Members": [vm("db", 0)]}), clock, settings=GroupSettings(initial_delay=0), poll=1.0)
    first = advance(run, backend, budget(clock, 0.0))  # the start is asked in this step
    assert not first.finished and run.start is not None and run.start.tiers[0].vms[0].booting
    backend.broken_reads = True
    _, outcome, _ = drive(run, backend, clock)
    assert not outcome.ok
    assert ("instance 'db' of Instance 'db' failed to start: RuntimeError: job for db failed: Insufficient capacity"
            in (outcome.reason or "")) and "readiness evaluation" not in (outcome.reason or "")


# --- checks that watch through the poll interval (a backend with `watch_check`) ---------------------


class _Watching(FakeBackend):
    """A backend whose checks can watch: a check not Ready keeps watching for the window it is
    offered and answers Ready the moment the script says (the clock moves to that moment), or the
    last refusal once the window is over (the clock moves past it)."""

    def __init__(self, clock: ManualClock, **kw: Any) -> None:
        super().__init__(clock, **kw)
        self.windows: list[tuple[str, float, float]] = []

    def watch_check(self, rule_type: str, vm: str, details: dict[str, str], timeout: float, window: float) -> Any:
        began = self.clock.now()
        self.windows.append((vm, began, window))
        found = self.vms[vm]
        ready_at = None if found.ready_after is None else (found.last_power_change or 0.0) + found.ready_after
        self.clock.advance(window if ready_at is None else min(window, max(0.0, ready_at - began)))
        return self.check(rule_type, vm, details, timeout - (self.clock.now() - began))


def test_a_watched_check_sees_readiness_the_moment_it_comes_not_at_the_next_poll(clock: ManualClock) -> None:
    settings = GroupSettings(initial_delay=0)
    members = members_of({"Members": [vm("db", 0, port(5432)), vm("web", 1, port(80))]})
    runs = {}
    watcher = _Watching(clock)
    for backend in (FakeBackend(clock), watcher):
        backend.add("db", ready_after=2.5), backend.add("web")
        run, outcome, _ = drive(new_run("start", members, clock, settings=settings), backend, clock)
        assert outcome.ok, outcome.reason
        runs[type(backend)] = (run, start_times(backend))
    polled, polled_starts = runs[FakeBackend]
    watched, watched_starts = runs[_Watching]
    assert polled_starts["web"] - polled.began == 10.0   # refused at 0 s, Ready at the 10 s poll
    assert watched_starts["web"] - watched.began == 2.5  # seen the moment db listened
    assert [(name, at - watched.began, window) for name, at, window in watcher.windows] == [
        ("db", 0.0, 10.0), ("web", 2.5, 10.0)]
    assert watched.start.tiers[0].vms[0].evaluations == 1  # type: ignore[union-attr]  # one evaluation, not one per try


def test_watched_rounds_are_one_evaluation_per_poll_and_n_plus_1_before_the_halt(clock: ManualClock) -> None:
    backend = _Watching(clock)
    backend.add("db", ready_after=None)
    run, outcome, _ = drive(new_run("start", members_of({"Members": [vm("db", 0, port(5432))]}), clock,
                                    settings=GroupSettings(max_retries=3, initial_delay=0)), backend, clock)
    assert not outcome.ok and "(attempt 4/4)" in (outcome.reason or "")
    # the watching is the pause: rounds back to back, one poll interval each, no extra sleep
    assert [(at - run.began, window) for _, at, window in backend.windows] == [
        (0.0, 10.0), (10.0, 10.0), (20.0, 10.0), (30.0, 10.0)]
    assert len(backend.check_calls("db")) == 4 and clock.now() - run.began == 40.0


def test_watching_ends_with_the_step_and_the_next_step_waits_what_is_left_of_the_interval(clock: ManualClock) -> None:
    backend = _Watching(clock)
    backend.add("db", ready_after=None)
    run = new_run("start", members_of({"Members": [vm("db", 0, port(5432))]}), clock,
                  settings=GroupSettings(max_retries=5, initial_delay=0))
    first = advance(run, backend, budget(clock, 15.0))
    assert not first.finished and clock.now() - run.began == 15.0 and first.delay == 5.0
    assert [(at - run.began, window) for _, at, window in backend.windows] == [(0.0, 10.0), (10.0, 5.0)]
    # A step with no time left does not watch: one plain check, then the whole interval as the delay.
    clock.advance(first.delay)
    second = advance(run, backend, budget(clock, 0.0))
    assert not second.finished and second.delay == 10.0 and len(backend.windows) == 2
    assert len(backend.check_calls("db")) == 3


def test_no_watching_when_a_round_has_more_instances_than_threads(clock: ManualClock) -> None:
    backend = _Watching(clock)
    names = [f"vm{n}" for n in range(4)]
    for name in names:
        backend.add(name, ready_after=5)
    members = members_of({"Members": [_group("all", names, 0, port(80))]})
    _, outcome, _ = drive(new_run("start", members, clock, settings=GroupSettings(initial_delay=0), concurrency=2),
                          backend, clock)
    assert outcome.ok and backend.windows == [] and len(backend.check_calls()) == 8  # refused at 0 s, Ready at 10 s


def test_short_polls_are_checkpointed_once_a_second_and_what_a_crash_loses_is_not_counted(clock: ManualClock) -> None:
    backend = FakeBackend(clock)
    backend.add("db", ready_after=None)
    run = new_run("start", members_of({"Members": [vm("db", 0, port(5432))]}), clock,
                  settings=GroupSettings(max_retries=20, initial_delay=0), poll=0.25)
    saved: list[Any] = []
    outcome = advance(run, backend, budget(clock, 2.6), checkpoint=lambda r: saved.append(dump_run(r)))
    assert not outcome.finished and run.start.tiers[0].vms[0].evaluations == 11  # type: ignore[union-attr]  # 0 .. 2.5 s
    # the tier's start calls, then its rounds at 0, 1 and 2 s: not one store per 0.25 s round
    assert len(saved) == 4
    resumed = load_run(saved[-1]).start.tiers[0].vms[0]  # type: ignore[union-attr]
    assert (resumed.evaluations, resumed.retries) == (9, 9)  # the rounds at 2.25 and 2.5 s died with the process
