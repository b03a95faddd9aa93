"""Re-entries that arrive after completion or after a takeover: answered again, never run again."""

from __future__ import annotations

import pytest

from crhelper import InProgress, Provider, Result
from crhelper.config import Settings
from crhelper.lifecycle import Lifecycle
from crhelper.reentry import continuation_payload
from crhelper.request import parse_request
from crhelper.runtime import guarded_runner
from crhelper.store import open_store
from crhelper.testing import make_event


class CapturingReentry:
    """A re-entry strategy the test fires by hand, so redeliveries happen exactly when it says."""

    name = "capture"
    unavailable_reason = None

    def __init__(self) -> None:
        self.scheduled: list[str] = []

    def schedule(self, continuation_id: str, delay: float) -> None:
        self.scheduled.append(continuation_id)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def provider(tmp_path, monkeypatch):
    monkeypatch.setenv("CRHELPER_STORE", f"sqlite:///{tmp_path / 'state.sqlite'}")
    made = Provider()
    yield made
    made.close()


def _two_step(provider, calls):
    @provider.create("Custom::Two")
    def create(props, request):
        calls.append(request.attempt)
        if request.attempt == 0:
            return InProgress(state={"step": 1}, delay=0)
        return Result(physical_id="two-1", data={"Step": request.state["step"]})


def test_redelivered_reentry_after_a_delivered_answer_sends_nothing(provider, response_server):
    calls: list[int] = []
    _two_step(provider, calls)
    reentry = CapturingReentry()
    event = response_server.attach(make_event("Create", "Custom::Two"))
    assert provider.process(event, reentry=reentry).body is None
    [continuation_id] = reentry.scheduled
    final = provider.process(continuation_payload(continuation_id), reentry=reentry)
    assert final.body is not None and final.body["Status"] == "SUCCESS" and final.delivered
    # FC (or MNS) delivers the re-entry again although its answer arrived: nothing is sent twice.
    again = provider.process(continuation_payload(continuation_id), reentry=reentry)
    assert again.body is None
    assert calls == [0, 1]
    assert response_server.responses_for(event["RequestId"]) == [final.body]


@pytest.mark.allow_violations
def test_redelivered_reentry_after_an_undelivered_answer_resends_it_once(provider, response_server):
    calls: list[int] = []
    _two_step(provider, calls)
    reentry = CapturingReentry()
    event = response_server.attach(make_event("Create", "Custom::Two"), fail_first=1, fail_status=400)
    assert provider.process(event, reentry=reentry).body is None
    [continuation_id] = reentry.scheduled
    final = provider.process(continuation_payload(continuation_id), reentry=reentry)
    assert final.body is not None and not final.delivered  # refused once by the ResponseURL
    again = provider.process(continuation_payload(continuation_id), reentry=reentry)
    assert again.body == final.body and again.delivered
    third = provider.process(continuation_payload(continuation_id), reentry=reentry)
    assert third.body is None
    assert calls == [0, 1]
    assert response_server.responses_for(event["RequestId"]) == [final.body]


def _lifecycle(tmp_path, clock: Clock, registry) -> Lifecycle:
    store = open_store(f"sqlite:///{tmp_path / 'clocked.sqlite'}", clock=clock)
    return Lifecycle(registry, store, default_type=None, step_lease=10, record_ttl=3600, clock=clock)


def test_orphaned_continuation_after_a_takeover_neither_runs_nor_cleans_up(tmp_path):
    provider = Provider()
    provider.set_deadline("Custom::Slow", 100)
    calls: list[int] = []
    cleaned: list[int] = []
    provider.create("Custom::Slow")(lambda props, request: calls.append(request.attempt) or InProgress(delay=5))
    provider.on_timeout("Custom::Slow")(lambda request: cleaned.append(request.attempt))
    clock = Clock()
    lifecycle = _lifecycle(tmp_path, clock, provider.registry)
    run = guarded_runner(provider.registry, Settings(), None, 0.0)
    reentry = CapturingReentry()
    event = make_event("Create", "Custom::Slow")
    request = parse_request(event)
    try:
        assert lifecycle.run(request, event, run, reentry).body is None
        # Every process dies; long after the deadline a redelivery takes the request over.
        clock.now += 200
        assert lifecycle.run(request, event, run, reentry).body is None
        assert calls == [0, 0]
        old, new = reentry.scheduled
        # The first operation's re-entry (or a recovery) must not act for a request it lost.
        assert lifecycle.resume(old, run, reentry) is None
        assert cleaned == [] and calls == [0, 0]
        assert lifecycle.store.get_continuation(old) is None
        assert lifecycle.store.get_continuation(new) is not None
    finally:
        lifecycle.store.close()


def test_finished_marker_is_removed_once_due_without_resending(tmp_path):
    provider = Provider()
    calls: list[int] = []

    @provider.create("Custom::Two")
    def create(props, request):
        calls.append(request.attempt)
        return InProgress(delay=1) if request.attempt == 0 else Result(physical_id="two")

    clock = Clock()
    lifecycle = _lifecycle(tmp_path, clock, provider.registry)
    run = guarded_runner(provider.registry, Settings(), None, 0.0)
    reentry = CapturingReentry()
    event = make_event("Create", "Custom::Two")
    try:
        lifecycle.run(parse_request(event), event, run, reentry)
        clock.now += 3  # the step's timer never fired: recovery picks it up
        [verdict] = lifecycle.recover(run, reentry)
        body = verdict.body
        assert body["Status"] == "SUCCESS" and calls == [0, 1]
        verdict.settle(False)  # its answer did not arrive
        clock.now += 60
        assert lifecycle.recover(run, reentry) == []          # not due: kept for redeliveries
        again = lifecycle.resume(reentry.scheduled[0], run, reentry)
        assert again.body == body
        again.settle(True)
        assert lifecycle.resume(reentry.scheduled[0], run, reentry) is None  # delivered now
        clock.now += 3600
        assert lifecycle.recover(run, reentry) == []          # due: removed, nothing re-sent
        assert lifecycle.store.get_continuation(reentry.scheduled[0]) is None
        assert calls == [0, 1]
    finally:
        lifecycle.store.close()


def test_duplicate_resumes_a_stalled_operation_by_the_lifecycle_clock(tmp_path):
    provider = Provider()
    calls: list[int] = []
    provider.create("Custom::Slow")(lambda props, request: calls.append(request.attempt) or InProgress(delay=5))
    clock = Clock()
    clock.now = 2_500_000_000.0  # far from the wall clock: only the injected clock may decide what is due
    lifecycle = _lifecycle(tmp_path, clock, provider.registry)
    run = guarded_runner(provider.registry, Settings(), None, 0.0)
    reentry = CapturingReentry()
    event = make_event("Create", "Custom::Slow")
    request = parse_request(event)
    try:
        lifecycle.run(request, event, run, reentry)
        clock.now += 30  # the re-entry was lost; the operation is due and nobody runs it
        assert lifecycle.run(request, event, run, reentry).body is None
        assert calls == [0, 1]
        assert reentry.scheduled == [reentry.scheduled[0]] * 2
    finally:
        lifecycle.store.close()
