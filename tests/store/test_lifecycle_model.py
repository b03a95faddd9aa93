"""A model check of `crhelper.lifecycle`: several simulated processes share one store and race for
one ROS request, crashing between any two store calls, while hypothesis interleaves deliveries,
re-entries (fired late, redelivered), recovery passes, lease renewals and time.

What is modelled
* one SqliteStore(":memory:") on a fake clock, shared by up to `MAX_PROCS` `Lifecycle` objects, one per
  simulated process (`identity` "proc-N", `is_dead` = "in the dead set", no background renewer);
* each process talks to the store through a proxy that counts its store calls (and its sends) and
  raises `Crash` (a BaseException, like a killed process) after the N-th one when armed; a crashed
  process is dead for good: its identity joins the dead set, any later store call of it raises;
* a handler that answers InProgress for its first K calls (by `request.attempt`) then a Result;
* a re-entry queue (FC async / MNS delayed messages): `schedule` records (fire_at, id); the machine
  fires entries on any live process, and may fire one again later (redelivery); it may be down;
* a ResponseURL: an answer is appended to `answers` then settled; the URL may refuse (nothing
  arrives, settle(False)) or lose the acknowledgement (it arrives, settle(False));
* while a handler runs, and while an answer is being sent (between the send and the settle), other
  actions may interleave: time passing with the background renewer keeping up (renew) or stalled
  (a frozen process), deliveries, re-entries and recovery on other processes, or the process dying.

Invariants (after every step, and after a final quiescent phase)
* never two different answers; every answer is the response in the idempotency record;
* an answer beyond the first arrives only after an uncertain delivery (a crash between a send and
  its settle, an acknowledgement lost, a stalled sender whose lease lapsed), or as a re-send that
  needs no settle (the stored response echoed to a duplicate delivery, as older code did);
* the handler never runs while another live process's step holds the request with a live lease,
  and never once the request's answer is recorded;
* at the end the request was answered, with the handler's final result (SUCCESS) or the deadline
  FAILED, and no unfinished continuation is left behind; a record marked DELIVERED was received.

Known bugs (KNOWN_BUGS) do not fail an example: the test ends in pytest.xfail naming them.
CRHELPER_MODEL_EXAMPLES=n runs more examples; CRHELPER_MODEL_RANDOM=1 explores new sequences.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from crhelper import InProgress, Provider, Result
from crhelper.config import Settings
from crhelper.lifecycle import EARLY_TOLERANCE, FOLLOW_UP_SLACK, Lifecycle, Verdict, key_of
from crhelper.request import parse_request
from crhelper.runtime import guarded_runner
from crhelper.store.base import RecordState
from crhelper.store.sqlite import SqliteStore
from crhelper.testing import make_event

pytestmark = pytest.mark.slow

RESOURCE_TYPE = "Custom::Job"
STEP_LEASE = 10.0
DEADLINE = 100.0
RECORD_TTL = 1_000_000.0
MAX_LIVE = 3
MAX_PROCS = 8
START = 1_700_000_000.0
#: Clock steps: inside a lease, past a lease, past the deadline (and the record's lease) at once.
STEPS = (1.0, 4.0, STEP_LEASE + 1, 3 * STEP_LEASE, DEADLINE + STEP_LEASE + 1)
EXAMPLES = int(os.environ.get("CRHELPER_MODEL_EXAMPLES", "200"))
#: Set CRHELPER_MODEL_RANDOM=1 to explore new sequences (the default replays the same ones: never flaky).
RANDOM = os.environ.get("CRHELPER_MODEL_RANDOM") == "1"


#: Known, unfixed bugs of crhelper/lifecycle.py: a violation whose text contains the pattern is
#: recorded here instead of failing the example, and the test ends in `pytest.xfail` naming it.
KNOWN_BUGS: dict[str, str] = {}
KNOWN_HITS: set[str] = set()


class Crash(BaseException):
    """The simulated process is killed (SIGKILL, OOM, FC instance recycled)."""


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


class ProcStore:
    """The shared store as one process sees it: every call is a point where the process may die."""

    def __init__(self, proc: "Proc", store: SqliteStore) -> None:
        self._proc = proc
        self._store = store

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if not callable(target):
            return target
        proc = self._proc

        def call(*args: Any, **kwargs: Any) -> Any:
            if proc.dead:
                raise Crash(f"{proc} is dead")
            result = target(*args, **kwargs)
            proc.tick(name)
            return result

        return call


class ModelReentry:
    """A delayed-invocation queue: what is scheduled is fired later by the machine, maybe twice."""

    name = "model-queue"
    unavailable_reason = None
    unavailable_reason = None

    def __init__(self, machine: "LifecycleModel", proc: "Proc") -> None:
        self._machine = machine
        self._proc = proc

    def schedule(self, continuation_id: str, delay: float) -> None:
        if self._proc.dead:
            raise Crash(f"{self._proc} is dead")
        if self._machine.queue_down:
            raise RuntimeError("the re-entry queue is unavailable")
        fire_at = self._machine.clock.now + delay
        self._machine.pending.append((fire_at, continuation_id))
        self._machine.event(f"{self._proc} scheduled a re-entry at +{fire_at - START:.1f}")


class Proc:
    def __init__(self, machine: "LifecycleModel", n: int) -> None:
        self.machine = machine
        self.ident = f"proc-{n}"
        self.dead = False
        self.ticks = 0
        self.crash_at: set[int] = set()
        self.store = ProcStore(self, machine.store)
        self.reentry = ModelReentry(machine, self)
        ident = self.ident
        self.lifecycle = Lifecycle(
            machine.provider.registry, self.store, default_type=None, step_lease=STEP_LEASE, record_ttl=RECORD_TTL,
            clock=machine.clock, identity=lambda: ident, is_dead=lambda other: other in machine.dead,
            renew_in_background=False, new_id=machine.new_id,
            sleep=lambda seconds: machine.advance(seconds, renew=True),  # an early re-entry waits; renewers keep up
        )

    def tick(self, where: str) -> None:
        """One more store call (or send) done; die here if armed to."""
        if self.dead:
            raise Crash(f"{self} is dead")
        self.ticks += 1
        if self.ticks in self.crash_at:
            self.machine.kill(self, f"after {where}")
            raise Crash(f"{self} crashed after {where}")

    def __repr__(self) -> str:
        return self.ident


class LifecycleModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Deterministic operation ids: recovery visits continuations in (next_run_at, id) order, and
        # random ids would make hypothesis's replays diverge.
        ids = itertools.count(1)
        self.new_id = lambda: f"op-{next(ids):04d}-" + "x" * 20
        self.clock = Clock()
        self.store = SqliteStore(":memory:", clock=self.clock)
        self.provider = Provider()
        self.provider.set_deadline(RESOURCE_TYPE, DEADLINE)
        self.provider.create(RESOURCE_TYPE)(self._handler)
        self.run = guarded_runner(self.provider.registry, Settings(), None, 0.0)
        self.raw = make_event("Create", RESOURCE_TYPE, {"Size": 1}, request_id="REQ-1",
                              stack_id="stack-1", response_url="http://ros.invalid/answer")
        self.key = key_of(parse_request(self.raw))
        self.k = 0
        self.delay = 0.0
        self.procs: list[Proc] = []
        self.dead: set[str] = set()
        self.pending: list[tuple[float, str]] = []
        self.fired: list[str] = []
        self.transport_retries = 0
        self.deliveries = 0
        self.queue_down = False
        self.answers: list[dict[str, Any]] = []
        self.echoes = 0
        #: How many more answers may arrive: one, plus one per uncertain delivery.
        self.budget = 1
        self.refused = 0
        self.calls: list[tuple[str, int]] = []
        self.stack: list[Proc] = []
        self.depth = 0
        self.violations: list[str] = []
        self.data: Any = None
        self.final = False
        #: Sends in progress: [process, an answer arrived that the store does not know of yet].
        self.sending: list[list[Any]] = []
        #: A hypothesis exception raised inside the handler (dispatch would swallow it): re-raised later.
        self.escaped: BaseException | None = None

    # helpers ---------------------------------------------------------------------------------
    def event(self, text: str) -> None:
        note(f"[+{self.clock.now - START:7.1f}] {text}")

    def draw(self, strategy: Any, default: Any) -> Any:
        if self.final or self.data is None:
            return default
        return self.data.draw(strategy)

    def violation(self, text: str) -> bool:
        """Record a broken invariant; True if it is a known bug (then only the test's outcome says so)."""
        for pattern, bug in KNOWN_BUGS.items():
            if pattern in text:
                self.event(f"KNOWN BUG ({bug}): {text}")
                KNOWN_HITS.add(bug)
                return True
        self.event(f"VIOLATION: {text}")
        self.violations.append(text)
        return False

    @property
    def live(self) -> list[Proc]:
        return [p for p in self.procs if not p.dead]

    def start(self) -> Proc:
        proc = Proc(self, len(self.procs) + 1)
        self.procs.append(proc)
        self.event(f"{proc} started")
        return proc

    def kill(self, proc: Proc, where: str) -> None:
        if not proc.dead:
            proc.dead = True
            self.dead.add(proc.ident)
            self.event(f"{proc} CRASHED {where}")
            for entry in self.sending:
                if entry[0] is proc and entry[1]:
                    entry[1] = False
                    self.budget += 1  # it died between a send and its settle: a re-send may follow

    def live_holds(self, besides: Proc | None = None) -> list[tuple[Proc, Any]]:
        now = self.clock.now
        return [(p, h) for p in self.live if p is not besides for h in p.lifecycle.holds()
                if not h.released and not h.lost and h.continuation.next_run_at > now]

    def advance(self, seconds: float, renew: bool) -> None:
        """Time passes; with `renew` every live process's renewer keeps up, else they all stall."""
        if renew:
            target = self.clock.now + seconds
            while self.clock.now < target:
                self.clock.now = min(target, self.clock.now + STEP_LEASE / 3)
                for proc in self.live:
                    for hold in proc.lifecycle.holds():
                        try:
                            proc.lifecycle.renew(hold)
                        except Crash:
                            break
            return
        before = self.live_holds()
        self.clock.now += seconds
        lapsed = [(p, h) for p, h in before if h.continuation.next_run_at <= self.clock.now]
        if lapsed:
            # A stalled (alive) holder lost its lease: another process may legitimately take the
            # step over, and re-send an answer the stalled one was sending.
            self.budget += len(lapsed)
            self.event(f"stall lapsed the leases of {[p for p, _ in lapsed]}")

    # the handler -----------------------------------------------------------------------------
    def _handler(self, props: dict[str, Any], request: Any) -> Any:
        proc = self.stack[-1]
        attempt = request.attempt
        self.calls.append((proc.ident, attempt))
        self.event(f"{proc} runs the handler (attempt {attempt})")
        record = self.store.get(self.key)
        for other, hold in self.live_holds(besides=proc):
            lapsed = record is not None and record.owner != hold.continuation.id
            self.violation(f"{proc} runs the handler (attempt {attempt}) while {other} holds continuation "
                           f"{hold.continuation.id[:7]} with a live lease (until +{hold.continuation.next_run_at - START:.1f})"
                           + (", the request's record was taken over from it" if lapsed else ""))
        if record is not None and record.state is not RecordState.IN_PROGRESS:
            self.violation(f"{proc} runs the handler (attempt {attempt}) after the answer was recorded")
        try:
            self.interleave(proc, "handler")
        except BaseException as exc:  # hypothesis's own (StopTest...): must not become a FAILED answer
            self.escaped = self.escaped or exc
        if attempt < self.k:
            return InProgress(state={"n": attempt + 1}, delay=self.delay)
        return Result(physical_id="job-1", data={"Calls": attempt})

    # actions ----------------------------------------------------------------------------------
    def act(self, proc: Proc, label: str, action: Callable[[], list[Verdict]], crash: int | None) -> None:
        """Run one action of a process and send what it answers; a crash ends the process."""
        arm = None
        if crash is not None:
            arm = proc.ticks + crash
            proc.crash_at.add(arm)
        self.event(f"{proc}: {label}" + (f" (dies after its call #{crash})" if crash else ""))
        self.stack.append(proc)
        try:
            for verdict in action():
                self.send(proc, verdict)
        except Crash:
            pass
        except Exception as exc:  # the runtime answers FAILED "internal error" (unrecorded) where it can
            if type(exc).__module__.startswith("hypothesis"):
                raise
            self.violation(f"{proc}: {label} raised {type(exc).__name__}: {exc}")
        finally:
            self.stack.pop()
            proc.crash_at.discard(arm)  # type: ignore[arg-type]
        if self.escaped is not None and not self.stack:
            escaped, self.escaped = self.escaped, None
            raise escaped

    def send(self, proc: Proc, verdict: Verdict | None) -> None:
        if verdict is None:
            return
        if verdict.retry_after is not None:
            self.transport_retries += 1  # the queue keeps its message and delivers it again
            self.event(f"{proc} asks the transport to retry in {verdict.retry_after:.1f} s")
        if verdict.body is None:
            return
        echo = verdict.on_settle is None  # the stored response re-sent to a duplicate delivery
        outcome = self.draw(st.sampled_from(["ok", "lost_ack", "refused"]), "ok")
        if outcome == "refused":
            self.refused += 1
            self.event(f"{proc} sends {verdict.body['Status']}: REFUSED by the ResponseURL")
        else:
            if echo:
                self.echoes += 1
            else:
                if self.budget >= 1:
                    self.budget -= 1
                else:
                    racing = [entry[0] for entry in self.sending if entry[1] and not entry[0].dead]
                    self.violation(f"{proc} sent the answer again without any uncertain delivery before "
                                   f"(answer #{len(self.answers) + 1})"
                                   + (f", while {racing[0]} is still sending it with a live lease" if racing else ""))
            self.answers.append(verdict.body)
            self.event(f"{proc} sends {verdict.body['Status']}" + (" (echo of the stored answer)" if echo else "")
                       + (", its acknowledgement is lost" if outcome == "lost_ack" else ""))
        entry = [proc, outcome != "refused" and not echo]
        self.sending.append(entry)
        try:
            proc.tick("a send")  # dying here: the answer went out, the store does not know
            self.interleave(proc, "send")
        finally:
            self.sending = [other for other in self.sending if other is not entry]
        if proc.dead:
            raise Crash(f"{proc} died while sending")
        if outcome == "lost_ack" and not echo:
            self.budget += 1
        verdict.settle(outcome == "ok")

    def deliver(self, proc: Proc, crash: int | None, label: str = "delivery of the request") -> None:
        request = parse_request(self.raw)
        self.deliveries += 1
        self.act(proc, label, lambda: [proc.lifecycle.run(request, self.raw, self.run, proc.reentry)], crash)

    def fire(self, proc: Proc, continuation_id: str, crash: int | None, label: str) -> None:
        self.act(proc, f"{label} {continuation_id[:7]}",
                 lambda: [proc.lifecycle.resume(continuation_id, self.run, proc.reentry)], crash)

    def recover(self, proc: Proc, crash: int | None) -> None:
        self.act(proc, "recovery pass", lambda: proc.lifecycle.recover(self.run, proc.reentry), crash)

    def renew(self, proc: Proc, crash: int | None) -> None:
        def renew_all() -> list[Verdict]:
            for hold in proc.lifecycle.holds():
                proc.lifecycle.renew(hold)
            return []

        self.act(proc, "renews its leases", renew_all, crash)

    def crash_strategy(self) -> Any:
        return st.none() | st.integers(1, 10)

    def interleave(self, proc: Proc, where: str) -> None:
        """Other things happen while `proc` runs its handler or sends its answer."""
        if self.depth or self.final:
            return
        count = self.draw(st.integers(0, 2), 0)
        self.depth += 1
        try:
            for _ in range(count):
                kind = self.draw(st.sampled_from(["time", "delivery", "fire", "recover", "die"]), "time")
                if kind == "time":
                    seconds = self.draw(st.sampled_from(STEPS), STEPS[0])
                    renew = self.draw(st.booleans(), True)
                    self.event(f"(during {proc}'s {where}) {seconds} s pass, renewers {'keep up' if renew else 'STALL'}")
                    self.advance(seconds, renew)
                elif kind == "die":
                    self.kill(proc, f"during its {where}")
                elif kind == "fire" and self.pending:
                    other = self.draw(st.sampled_from(self.live), None) if self.live else None
                    if other is not None:
                        fire_at, cid = self.pending.pop(self.draw(st.integers(0, len(self.pending) - 1), 0))
                        self.advance(max(0.0, fire_at - self.clock.now), renew=True)
                        self.fired.append(cid)
                        self.fire(other, cid, self.draw(self.crash_strategy(), None), f"(during {proc}'s {where}) re-entry")
                elif kind in ("delivery", "recover") and self.live:
                    other = self.draw(st.sampled_from(self.live), None)
                    crash = self.draw(self.crash_strategy(), None)
                    if kind == "delivery":
                        self.deliver(other, crash, f"(during {proc}'s {where}) duplicate delivery")
                    else:
                        self.act(other, f"(during {proc}'s {where}) recovery pass",
                                 lambda o=other: o.lifecycle.recover(self.run, o.reentry), crash)
        finally:
            self.depth -= 1

    # rules ------------------------------------------------------------------------------------
    @initialize(k=st.integers(0, 3), delay=st.sampled_from([0.0, 3.0, 30.0]))
    def setup(self, k: int, delay: float) -> None:
        self.k, self.delay = k, delay
        self.event(f"handler: InProgress for {k} call(s) (delay {delay}), then a Result")
        self.start()

    @precondition(lambda self: len(self.live) < MAX_LIVE and len(self.procs) < MAX_PROCS)
    @rule()
    def start_process(self) -> None:
        self.start()

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def delivery(self, data: Any) -> None:
        self.data = data
        proc = data.draw(st.sampled_from(self.live))
        self.deliver(proc, data.draw(self.crash_strategy()))

    @precondition(lambda self: bool(self.live) and bool(self.pending))
    @rule(data=st.data())
    def fire_reentry(self, data: Any) -> None:
        """The queue fires the next (or any) scheduled re-entry once it is due."""
        self.data = data
        fire_at, cid = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        self.advance(max(0.0, fire_at - self.clock.now), renew=False)
        self.fired.append(cid)
        self.fire(data.draw(st.sampled_from(self.live)), cid, data.draw(self.crash_strategy()), "re-entry")

    @precondition(lambda self: bool(self.live) and bool(self.fired))
    @rule(data=st.data())
    def redeliver_reentry(self, data: Any) -> None:
        """The queue delivers a re-entry it already delivered (at-least-once)."""
        self.data = data
        cid = data.draw(st.sampled_from(self.fired))
        self.fire(data.draw(st.sampled_from(self.live)), cid, data.draw(self.crash_strategy()), "REDELIVERED re-entry")

    @precondition(lambda self: bool(self.live) and self.transport_retries > 0)
    @rule(data=st.data())
    def transport_retry(self, data: Any) -> None:
        self.data = data
        self.transport_retries -= 1
        self.deliver(data.draw(st.sampled_from(self.live)), data.draw(self.crash_strategy()), "transport retry of the request")

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def recovery(self, data: Any) -> None:
        self.data = data
        self.recover(data.draw(st.sampled_from(self.live)), data.draw(self.crash_strategy()))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def renewal(self, data: Any) -> None:
        self.data = data
        self.renew(data.draw(st.sampled_from(self.live)), data.draw(self.crash_strategy()))

    @rule(seconds=st.sampled_from(STEPS))
    def time_passes(self, seconds: float) -> None:
        self.event(f"{seconds} s pass")
        self.advance(seconds, renew=False)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def kill_idle(self, data: Any) -> None:
        self.kill(data.draw(st.sampled_from(self.live)), "while idle")

    @rule()
    def queue_outage(self) -> None:
        self.queue_down = not self.queue_down
        self.event(f"re-entry queue {'DOWN' if self.queue_down else 'back'}")

    # invariants -------------------------------------------------------------------------------
    @invariant()
    def no_violation(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def one_answer_and_it_is_recorded(self) -> None:
        if not self.answers:
            return
        assert all(body == self.answers[0] for body in self.answers), f"different answers: {self.answers}"
        record = self.store.get(self.key)
        assert record is not None and record.state is not RecordState.IN_PROGRESS, f"answered but not recorded: {record}"
        assert record.response == self.answers[0], (record.response, self.answers[0])

    @invariant()
    def delivered_only_if_it_arrived(self) -> None:
        record = self.store.get(self.key)
        if record is not None and record.state.value == "DELIVERED":
            assert self.answers, f"the record says DELIVERED but nothing arrived: {record}"

    # the end ----------------------------------------------------------------------------------
    def snapshot(self) -> Any:
        record = self.store.get(self.key)
        return (record, tuple(self.store.due_continuations(float("inf"), 1000)), len(self.pending), len(self.answers))

    def settle_down(self, proc: Proc) -> None:
        """Fire everything pending and recover until nothing changes."""
        for _ in range(60):
            before = self.snapshot()
            while self.pending:
                self.pending.sort()
                fire_at, cid = self.pending.pop(0)
                self.clock.now = max(self.clock.now, fire_at)
                self.fired.append(cid)
                self.fire(proc, cid, None, "final re-entry")
            self.recover(proc, None)
            while self.transport_retries:
                self.transport_retries -= 1
                self.deliver(proc, None, "final transport retry")
            if not self.pending and self.snapshot() == before:
                return
            self.clock.now += STEP_LEASE + FOLLOW_UP_SLACK + EARLY_TOLERANCE + 1
        raise AssertionError("the lifecycle did not settle down")

    def teardown(self) -> None:
        try:
            if self.violations:
                return  # already reported by the invariant
            self.final = True
            self.queue_down = False
            proc = self.live[0] if self.live else self.start()
            if not self.deliveries:
                self.deliver(proc, None, "the only delivery of the request")  # ROS delivers it at least once
            # Past every lease and the deadline.
            ends = [self.clock.now]
            for continuation in self.store.due_continuations(float("inf"), 1000):
                if not continuation.finished:
                    ends += [continuation.next_run_at, continuation.deadline]
            record = self.store.get(self.key)
            if record is not None:
                ends.append(record.lease_expires_at)
            self.clock.now = max(ends) + EARLY_TOLERANCE + 1
            self.event("final phase")
            self.settle_down(proc)
            if not self.answers and self.refused:
                # Every answer sent was refused: only a redelivery re-sends it (the request, or a re-entry).
                self.event("a refused answer: the transport redelivers")
                self.deliver(proc, None, "final redelivery of the request")
                for cid in self.fired[-1:]:
                    self.fire(proc, cid, None, "final redelivery of re-entry")
                self.settle_down(proc)
            self.no_violation()
            assert self.answers, "the request was never answered"
            self.one_answer_and_it_is_recorded()
            body = self.answers[0]
            if body["Status"] == "SUCCESS":
                assert body.get("Data") == {"Calls": self.k}, body
                assert body["PhysicalResourceId"] == "job-1", body
            else:
                assert body["Status"] == "FAILED" and body["Reason"].startswith("did not complete within"), body
            event(f"answered {body['Status']}")
            event(f"answers sent: {len(self.answers)} (echoes {self.echoes})")
            event(f"processes crashed: {len(self.dead)}")
            event(f"handler calls: {len(self.calls)}, re-runs: {len(self.calls) - len(set(a for _, a in self.calls))}")
            left = [c for c in self.store.due_continuations(float("inf"), 1000) if not c.finished]
            assert not left, f"unfinished continuations left behind: {left}"
        finally:
            self.store.close()


def test_lifecycle_model() -> None:
    KNOWN_HITS.clear()
    run_state_machine_as_test(
        LifecycleModel,
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=25, deadline=None, derandomize=not RANDOM, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
        ),
    )
    if KNOWN_HITS:
        pytest.xfail("known lifecycle bug(s) reached: " + "; ".join(sorted(KNOWN_HITS)))
