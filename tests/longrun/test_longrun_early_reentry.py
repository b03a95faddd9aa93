"""Re-entries that arrive before their step is due (FC re-invocations are sent FC_LEAD seconds early):
a little early waits for the due time, too early re-schedules itself, late runs at once; duplicates
are still absorbed and the request answered once. All on a fake clock: the lifecycle sleeps on it."""

from __future__ import annotations

import threading
import time

import pytest

from crhelper import InProgress, Provider, Result
from crhelper.config import Settings
from crhelper.operations.budget import ManualClock
from crhelper.lifecycle import EARLY_TOLERANCE, Lifecycle, Verdict
from crhelper.reentry import FC_LEAD, step_of
from crhelper.request import parse_request
from crhelper.runtime import guarded_runner
from crhelper.store import open_store
from crhelper.store.budget import store_deadline
from crhelper.testing import make_event

DELAY = 5.0


class Clock(ManualClock):
    """The lifecycle's clock; `sleep` also remembers how long each wait was."""

    def __init__(self) -> None:
        super().__init__(start=2_000_000_000.0)
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        super().sleep(seconds)

    def set(self, when: float) -> None:
        assert when >= self.now(), "this clock only moves forward"
        self.advance(when - self.now())


class StepReentry:
    """Records which entry point the lifecycle used: `schedule_step` (a step's re-entry, sent early
    on FC) or `schedule` (a follow-up), and whether it asked the path to get ready."""

    name = "capture"
    unavailable_reason = None

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, float]] = []
        self.prepared = threading.Event()

    def schedule(self, continuation_id: str, delay: float) -> None:
        self.calls.append(("schedule", continuation_id, delay))

    def schedule_step(self, continuation_id: str, delay: float) -> None:
        self.calls.append(("schedule_step", continuation_id, delay))

    def prepare(self) -> None:
        self.prepared.set()


@pytest.fixture
def setup(tmp_path):
    provider = Provider()
    calls: list[tuple[int, float]] = []
    clock = Clock()

    @provider.create("Custom::Polled")
    def create(props, request):
        calls.append((request.attempt, clock.now()))
        if request.attempt < 2:
            return InProgress(state=request.attempt, delay=DELAY)
        return Result(physical_id="polled-1")

    store = open_store(f"sqlite:///{tmp_path / 'early.sqlite'}", clock=clock.now)
    lifecycle = Lifecycle(provider.registry, store, default_type=None, step_lease=30, record_ttl=3600,
                          clock=clock.now, sleep=clock.sleep)
    run = guarded_runner(provider.registry, Settings(), None, 0.0)
    reentry = StepReentry()
    event = make_event("Create", "Custom::Polled")
    assert lifecycle.run(parse_request(event), event, run, reentry).body is None
    [(method, operation_id, delay)] = reentry.calls
    assert (method, delay) == ("schedule_step", DELAY)
    reentry.calls.clear()
    yield lifecycle, run, reentry, clock, calls, operation_id
    store.close()


def _sent(verdict: Verdict | None) -> dict | None:
    """The body a resume asks to send (None: nothing, e.g. a step that returned InProgress again)."""
    return None if verdict is None else verdict.body


def _due(lifecycle: Lifecycle, operation_id: str) -> float:
    continuation = lifecycle.store.get_continuation(operation_id)
    assert continuation is not None
    return continuation.next_run_at


def test_fc_lead_fits_in_the_early_tolerance():
    assert 0 < FC_LEAD <= EARLY_TOLERANCE


def test_a_slightly_early_reentry_waits_for_the_due_time_then_runs(setup):
    lifecycle, run, reentry, clock, calls, operation_id = setup
    due = _due(lifecycle, operation_id)
    clock.set(due - 0.6)
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None  # ran the step: InProgress again
    assert clock.slept == [pytest.approx(0.6)]
    assert calls[-1] == (1, pytest.approx(due))  # the handler ran at the due time, not before
    assert [c[0] for c in reentry.calls] == ["schedule_step"]
    assert reentry.prepared.wait(5)  # the path got ready while the step waited


def test_a_too_early_reentry_reschedules_itself_and_runs_nothing(setup):
    lifecycle, run, reentry, clock, calls, operation_id = setup
    due = _due(lifecycle, operation_id)
    clock.set(due - EARLY_TOLERANCE - 2.0)  # e.g. a platform that ignored x-fc-async-delay
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None
    assert clock.slept == [] and [c[0] for c in calls] == [0]
    [(method, again, delay)] = reentry.calls
    assert (method, again) == ("schedule_step", operation_id) and delay == pytest.approx(EARLY_TOLERANCE + 2.0)
    clock.set(due)
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None
    assert [c[0] for c in calls] == [0, 1]


def test_a_late_reentry_runs_at_once(setup):
    lifecycle, run, reentry, clock, calls, operation_id = setup
    clock.set(_due(lifecycle, operation_id) + 2.5)
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None
    assert clock.slept == [] and calls[-1] == (1, clock.now())


def test_no_waiting_past_what_the_invocation_has_left(setup):
    lifecycle, run, reentry, clock, calls, operation_id = setup
    clock.set(_due(lifecycle, operation_id) - 0.6)
    with store_deadline(time.monotonic() + 0.8):  # 0.8 s left: waiting 0.6 s would leave too little
        assert _sent(lifecycle.resume(operation_id, run, reentry)) is None
    assert clock.slept == [] and [c[0] for c in calls] == [0]
    assert [c[0] for c in reentry.calls] == ["schedule_step"]


def test_duplicate_early_reentries_run_each_step_once_and_answer_once(setup, response_server):
    lifecycle, run, reentry, clock, calls, operation_id = setup
    due = _due(lifecycle, operation_id)
    clock.set(due - 0.5)
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None  # step 1 (waited 0.5 s)
    # FC delivered the same re-entry twice: the copy, for step 1, finds step 2 five seconds ahead;
    # it names its step, so it is dropped (no re-schedule: no extra invocation on every poll).
    assert step_of(operation_id) == 1
    assert _sent(lifecycle.resume(operation_id, run, reentry)) is None
    assert [c[0] for c in calls] == [0, 1]
    assert [c[0] for c in reentry.calls] == ["schedule_step"]
    # A copy in the payload form of earlier versions (no step) still re-schedules itself.
    assert _sent(lifecycle.resume(str(operation_id), run, reentry)) is None
    assert [c[0] for c in reentry.calls] == ["schedule_step", "schedule_step"]
    # Both arrive for step 2: the first runs it and answers; the second finds the operation finished.
    step_2 = reentry.calls[0][1]
    assert step_of(step_2) == 2 and step_2 == operation_id
    clock.set(_due(lifecycle, operation_id) - 0.3)
    verdict = lifecycle.resume(step_2, run, reentry)
    assert verdict is not None and verdict.body is not None and verdict.body["Status"] == "SUCCESS"
    verdict.settle(True)
    assert _sent(lifecycle.resume(step_2, run, reentry)) is None
    assert [c[0] for c in calls] == [0, 1, 2]
