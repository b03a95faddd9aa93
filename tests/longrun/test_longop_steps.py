"""Long operations written as steps over typed state, with ordered tiers inside, end to end: a real
Provider and store, the in-process scheduler as re-entry, the ResponseServer checking every answer.
Time inside the operations runs on a ManualClock, so hours of waiting take milliseconds."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from dataclasses import dataclass, field

import pytest
from pydantic import BaseModel

from crhelper import Failure, Provider, Request, Result, operations, tiers
from crhelper.operations import Budget, Continue, ManualClock
from crhelper.reentry import continuation_payload
from crhelper.testing import make_event

TIERS = {"db": 0, "app-1": 1, "app-2": 1, "web": 2}


class Members(BaseModel):
    Members: dict[str, int] = TIERS
    TierTimeout: float = 300
    Concurrency: int = 10


@dataclass
class Run:
    progress: tiers.TierProgress | None = None
    notes: list[str] = field(default_factory=list)


@pytest.fixture
def store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    monkeypatch.setenv("CRHELPER_STORE", url)
    return url


class Backend:
    """Members that become ready after `checks` readiness checks; every call recorded."""

    def __init__(self, clock: ManualClock, checks: int = 3, failing: dict[str, str] | None = None) -> None:
        self.clock, self.checks, self.failing = clock, checks, failing or {}
        self.lock = threading.Lock()
        self.started: list[tuple[str, float]] = []
        self.calls: dict[str, int] = {}
        self.probes: dict[str, int] = {}

    def act(self, member: str, run: tiers.ItemRun) -> str:
        with self.lock:
            self.calls[member] = self.calls.get(member, 0) + 1
        run.once("start", lambda: self._start(member))
        if member in self.failing:
            raise Failure(self.failing[member])
        run.wait_until(lambda: self._ready(member), every=10, name=f"{member} ready")
        return f"{member}-ok"

    def _start(self, member: str) -> None:
        with self.lock:
            self.started.append((member, self.clock.now()))

    def _ready(self, member: str) -> bool:
        with self.lock:
            self.probes[member] = self.probes.get(member, 0) + 1
            return self.probes[member] >= self.checks


def tiered_provider(make, backend: Backend, *, policy: str = tiers.HALT, descending: bool = False,
                    step_seconds: float = 25.0, attempts: list[int] | None = None) -> Provider:
    provider = make()

    @operations.create(provider, "Custom::Boot", state=Run, clock=backend.clock, step_seconds=step_seconds,
                       plan=lambda p: tiers.worst_case(p.Members, p.TierTimeout), plan_advice="lower the tier timeouts")
    def create(props: Members, state: Run, request: Request, budget: Budget) -> Result:
        if attempts is not None:
            attempts.append(request.attempt)
        if state.progress is None:
            state.progress = tiers.plan(props.Members, descending=descending, policy=policy)
        outcome = tiers.run(state.progress, {m: m for m in props.Members}, backend.act, budget,
                            concurrency=props.Concurrency, tier_timeout=props.TierTimeout)
        if not outcome.ok:
            raise Failure(outcome.reason or "failed")
        timeline = [[t.order, t.started, t.ended] for t in state.progress.tiers]
        return Result(physical_id="boot-1", data={"Timeline": timeline})

    return provider


def answer(response_server, event, timeout: float = 5.0) -> dict:
    body = response_server.wait_for(event["RequestId"], timeout=timeout)
    time.sleep(0.1)  # room for a second answer, which must not come
    assert len(response_server.responses_for(event["RequestId"])) == 1
    return body


def test_three_tiers_run_in_order_across_reentries_with_one_success(response_server, store, providers):
    clock, attempts = ManualClock(), []
    backend = Backend(clock, checks=3)
    provider = tiered_provider(providers, backend, attempts=attempts)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": TIERS}))
    assert provider.handle(event) is None  # not done in the first call
    body = answer(response_server, event)
    assert body["Status"] == "SUCCESS", body
    assert max(attempts) >= 2  # each tier needs 20 s of checks, a step has 25 s: re-entries in between
    order = [member for member, _ in backend.started]
    assert order[0] == "db" and sorted(order[1:3]) == ["app-1", "app-2"] and order[3] == "web"
    assert backend.calls == {m: 3 for m in TIERS}  # a finished item is never called again, started once
    timeline = body["Data"]["Timeline"]
    assert [t[0] for t in timeline] == [0, 1, 2]
    assert all(later[1] >= earlier[2] for earlier, later in zip(timeline, timeline[1:]))


def test_halt_policy_stops_at_the_failing_tier_and_names_it(response_server, store, providers):
    backend = Backend(ManualClock(), checks=1, failing={"app-1": "disk full on app-1"})
    provider = tiered_provider(providers, backend, policy=tiers.HALT)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": TIERS}))
    provider.handle(event)
    body = answer(response_server, event)
    assert body["Status"] == "FAILED"
    assert body["Reason"] == "tier 2 of 3 (order 1) failed: app-1: disk full on app-1; later tiers were not started"
    assert "web" not in backend.calls


def test_continue_policy_in_descending_order_reports_every_failure(response_server, store, providers):
    backend = Backend(ManualClock(), checks=2, failing={"web": "web refused to stop", "db": "db refused to stop"})
    provider = tiered_provider(providers, backend, policy=tiers.CONTINUE, descending=True)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": TIERS, "Concurrency": 1}))
    provider.handle(event)
    body = answer(response_server, event)
    assert [member for member, _ in backend.started] == ["web", "app-1", "app-2", "db"]  # stop: tier 2, 1, then 0
    assert body["Status"] == "FAILED"
    assert body["Reason"] == ("2 of 4 item(s) failed: web (order 2): web refused to stop; "
                              "db (order 0): db refused to stop")


class Gauge:
    """Counts the actions running at once, and the most there ever were."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


def test_concurrency_bound_is_respected(response_server, store, providers):
    clock, running = ManualClock(), Gauge()
    provider = providers()

    def act(member: str, run: tiers.ItemRun) -> None:
        with running:
            time.sleep(0.03)

    @operations.create(provider, "Custom::Wide", state=Run, clock=clock)
    def create(props: dict, state: Run, request: Request, budget: Budget) -> Result:
        state.progress = state.progress or tiers.plan({f"vm-{n}": 0 for n in range(7)})
        outcome = tiers.run(state.progress, {f"vm-{n}": f"vm-{n}" for n in range(7)}, act, budget, concurrency=3)
        return Result(data={"Ok": outcome.ok})

    event = response_server.attach(make_event("Create", "Custom::Wide"))
    provider.handle(event)
    assert answer(response_server, event)["Data"] == {"Ok": True}
    assert running.peak == 3


def test_a_plan_over_the_deadline_fails_at_create_naming_both_numbers(response_server, store, providers):
    backend = Backend(ManualClock())
    provider = tiered_provider(providers, backend)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": {"db": 0, "web": 1}, "TierTimeout": 1880}))
    provider.handle(event)
    body = answer(response_server, event)
    assert body["Status"] == "FAILED"
    assert body["Reason"] == ("the plan may take 3,760 s but Custom::Boot's deadline is 1,800 s: lower the tier timeouts "
                              "or raise the deadline with provider.set_deadline('Custom::Boot', 3760)")
    assert backend.calls == {}  # refused before anything started

    provider.set_deadline("Custom::Boot", 3_800)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": {"db": 0, "web": 1}, "TierTimeout": 1880}))
    provider.handle(event)
    assert answer(response_server, event)["Status"] == "SUCCESS"


def test_a_plan_beyond_ros_longest_timeout_says_no_deadline_can_hold_it(response_server, store, providers):
    provider = tiered_provider(providers, Backend(ManualClock()))
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": {"a": 0, "b": 1, "c": 2}, "TierTimeout": 20_000}))
    provider.handle(event)
    reason = answer(response_server, event)["Reason"]
    assert reason.startswith("the plan may take 60,000 s but Custom::Boot's deadline is 1,800 s and no deadline may "
                             "exceed 43,200 s (ROS's longest Timeout)")


def test_a_deadline_above_43200_s_is_refused_precisely(providers):
    provider = providers()
    with pytest.raises(ValueError) as raised:
        provider.set_deadline("Custom::Boot", 43_201)
    assert str(raised.value).startswith("Custom::Boot: a deadline of 43,201 s is above 43,200 s, ROS's longest Timeout")
    with pytest.raises(ValueError, match="at least 1 s"):
        provider.set_deadline("Custom::Boot", 0)
    with pytest.raises(ValueError, match="must be a number of seconds, got True"):
        provider.set_deadline("Custom::Boot", True)
    provider.set_deadline("Custom::Boot", 43_200)
    assert provider.registry.options("Custom::Boot").deadline == 43_200


def capturing_reentry() -> SimpleNamespace:
    """A re-entry whose calls the test delivers by hand (to another provider version)."""
    scheduled: list[str] = []
    return SimpleNamespace(name="capture", unavailable_reason=None, scheduled=scheduled,
                           schedule=lambda continuation_id, delay: scheduled.append(continuation_id))


@dataclass
class V1:
    polls: int = 0


@dataclass
class V2:
    polls: str = ""


def versioned(make, version: int, state: type, **options) -> Provider:
    provider = make()

    @operations.create(provider, "Custom::Versioned", state=state, version=version, **options)
    def create(props: dict, current, request: Request, budget: Budget):
        if request.attempt == 0:
            return Continue(delay=0)
        return Result(data={"Polls": current.polls})

    return provider


def test_a_state_from_another_version_fails_with_a_clear_reason(response_server, store, providers):
    reentry = capturing_reentry()
    old, new = versioned(providers, 1, V1), versioned(providers, 2, V2)
    event = response_server.attach(make_event("Create", "Custom::Versioned"))
    assert old.process(event, reentry=reentry).body is None
    body = new.process(continuation_payload(reentry.scheduled[-1]), reentry=reentry).body
    assert body is not None and body["Status"] == "FAILED"
    assert body["Reason"] == (
        "the stored state of this Custom::Versioned Create is version 1 (V1) but this provider reads version 2 (V2); "
        "it cannot be continued: finish the operation with the provider version that started it, or delete and "
        "recreate the resource")
    assert len(response_server.responses_for(event["RequestId"])) == 1


def test_a_changed_state_under_the_same_version_names_the_field(response_server, store, providers):
    reentry = capturing_reentry()
    old, new = versioned(providers, 1, V1), versioned(providers, 1, V2)
    event = response_server.attach(make_event("Create", "Custom::Versioned"))
    old.process(event, reentry=reentry)
    body = new.process(continuation_payload(reentry.scheduled[-1]), reentry=reentry).body
    assert body is not None
    assert body["Reason"] == ("the stored state of this Custom::Versioned Create (version 1) does not fit V2: state.polls: "
                              "Input should be a valid string; bump version= (and give migrate=) when the state's fields change")


def test_migrate_upgrades_an_older_state(response_server, store, providers):
    reentry = capturing_reentry()
    old = versioned(providers, 1, V1)
    new = versioned(providers, 2, V2, migrate=lambda version, raw: {"polls": f"v{version}:{raw['polls']}"})
    event = response_server.attach(make_event("Create", "Custom::Versioned"))
    old.process(event, reentry=reentry)
    body = new.process(continuation_payload(reentry.scheduled[-1]), reentry=reentry).body
    assert body is not None and body["Status"] == "SUCCESS" and body["Data"] == {"Polls": "v1:0"}


@dataclass
class Counter:
    steps: int = 0


def test_a_step_raising_failure_after_reentry_answers_that_reason(response_server, store, providers):
    provider = providers()

    @operations.create(provider, "Custom::Quota", state=Counter, clock=ManualClock())
    def create(props: dict, state: Counter, request: Request, budget: Budget):
        state.steps += 1
        if state.steps < 3:
            return Continue(delay=60)
        raise Failure(f"quota exceeded after {state.steps} steps, attempt {request.attempt}")

    event = response_server.attach(make_event("Create", "Custom::Quota"))
    provider.handle(event)
    body = answer(response_server, event)
    assert body["Status"] == "FAILED" and body["Reason"] == "quota exceeded after 3 steps, attempt 2"


def test_a_wait_that_never_succeeds_times_out_with_its_name(response_server, store, providers):
    clock, checks = ManualClock(), []
    provider = providers()

    @operations.update(provider, "Custom::Wait", state=Counter, clock=clock, step_seconds=45)
    def update(props: dict, old: dict, state: Counter, request: Request, budget: Budget):
        budget.wait_until(lambda: checks.append(clock.now()) and False, every=20, up_to=100, name="listener up")
        return Result()

    event = response_server.attach(make_event("Update", "Custom::Wait", physical_resource_id="w-1"))
    provider.handle(event)
    body = answer(response_server, event)
    assert body["Reason"] == "listener up: not ready after 100 s (6 check(s))"
    assert [round(t - checks[0]) for t in checks] == [0, 20, 40, 60, 80, 100]


def test_a_tier_over_its_timeout_fails_naming_the_tier(response_server, store, providers):
    backend = Backend(ManualClock(), checks=10**6)
    provider = tiered_provider(providers, backend, step_seconds=3_600)
    event = response_server.attach(make_event("Create", "Custom::Boot", {"Members": {"db": 0, "web": 1}, "TierTimeout": 95}))
    provider.handle(event)
    reason = answer(response_server, event)["Reason"]
    assert reason == ("tier 1 of 2 (order 0) failed: db: db ready: tier 1 (order 0) did not finish within 95 s "
                      "(11 check(s)); later tiers were not started")


@pytest.mark.slow
def test_the_type_deadline_and_on_timeout_still_apply(response_server, store, providers):
    provider, cleaned = providers(), []
    provider.set_deadline("Custom::Never", 1)

    @operations.create(provider, "Custom::Never", state=Counter)
    def create(props: dict, state: Counter, request: Request, budget: Budget):
        state.steps += 1
        return Continue(delay=0.2)

    provider.on_timeout("Custom::Never")(lambda request: cleaned.append(request.state))
    event = response_server.attach(make_event("Create", "Custom::Never"))
    provider.handle(event)
    body = answer(response_server, event)
    assert body["Reason"].startswith("did not complete within 1 s")
    assert cleaned and cleaned[0]["state"]["steps"] >= 2  # the hook sees the operation's stored state
