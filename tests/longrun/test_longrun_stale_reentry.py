"""A duplicated re-entry for a step that already ran (FC async invocations and MNS messages arrive at
least once) is dropped on arrival: it does not re-schedule itself, which cost one extra invocation on
every poll until the operation ended. Re-entries name their step; the payload of earlier versions
(the id alone) is still accepted."""

from __future__ import annotations

import json
import textwrap
import time
from typing import Callable

import pytest

from crhelper import InProgress, Provider, Request, Result
from crhelper.local.fc_server import LocalFunctionCompute
from crhelper.reentry import (
    CONTINUATION_FIELD, STEP_FIELD, ContinuationRef, LocalScheduler, continuation_id_of, continuation_payload, step_of,
)
from crhelper.store import Continuation, open_store
from crhelper.testing import make_event


def test_the_payload_carries_the_step_and_the_old_form_is_still_read() -> None:
    assert json.loads(continuation_payload(ContinuationRef("op-1", 3))) == {CONTINUATION_FIELD: "op-1", STEP_FIELD: 3}
    assert json.loads(continuation_payload("op-1", step=2)) == {CONTINUATION_FIELD: "op-1", STEP_FIELD: 2}
    assert json.loads(continuation_payload("op-1")) == {CONTINUATION_FIELD: "op-1"}
    new = continuation_id_of({CONTINUATION_FIELD: "op-1", STEP_FIELD: 3})
    old = continuation_id_of({CONTINUATION_FIELD: "op-1"})
    assert new == "op-1" and step_of(new) == 3
    assert old == "op-1" and step_of(old) is None
    for not_a_reentry in ({CONTINUATION_FIELD: "op-1", STEP_FIELD: "3"}, {CONTINUATION_FIELD: "op-1", STEP_FIELD: -1},
                          {CONTINUATION_FIELD: "op-1", STEP_FIELD: True}, {CONTINUATION_FIELD: "op-1", "RequestType": "Create"},
                          {CONTINUATION_FIELD: 7}):
        assert continuation_id_of(not_a_reentry) is None


def _wait_for_step(url: str, step: int, timeout: float = 20) -> Continuation:
    """The operation's continuation once it waits for `step` (the step before it ran)."""
    store = open_store(url)
    try:
        ends = time.monotonic() + timeout
        while time.monotonic() < ends:
            found = [c for c in store.due_continuations(1e12) if c.attempt == step and not c.holder]
            if found:
                return found[0]
            time.sleep(0.02)
    finally:
        store.close()
    raise AssertionError(f"the operation never reached step {step}")


def _polled(url: str, steps: int, delay_of: Callable[[int], float]) -> tuple[Provider, list[int]]:
    """A provider whose Custom::Polled answers InProgress (after `delay_of(attempt)`) for its first
    `steps` calls, then SUCCESS; and the attempts it was called with."""
    provider = Provider(store=url)
    calls: list[int] = []

    @provider.create("Custom::Polled")
    def create(props: dict, request: Request) -> InProgress | Result:
        calls.append(request.attempt)
        if request.attempt < steps:
            return InProgress(state=request.attempt, delay=delay_of(request.attempt))
        return Result(physical_id="polled-1")

    return provider, calls


def test_a_stale_reentry_through_the_in_process_scheduler_is_dropped(tmp_path, response_server) -> None:
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    provider, calls = _polled(url, 1000, lambda attempt: 0 if attempt == 0 else 60)

    def resume(continuation_id: str) -> None:
        provider.process(continuation_payload(continuation_id), reentry=scheduler)

    scheduler = LocalScheduler(resume)
    try:
        event = response_server.attach(make_event("Create", "Custom::Polled"))
        assert provider.process(event, reentry=scheduler).body is None
        waiting = _wait_for_step(url, 2)  # step 1 ran at once; step 2 is due in 60 s
        ends = time.monotonic() + 10
        while scheduler.pending() == 0 and time.monotonic() < ends:  # stored, then scheduled
            time.sleep(0.01)
        assert calls == [0, 1] and scheduler.pending() == 1
        # The step-1 re-entry delivered a second time: dropped, nothing scheduled, nothing run.
        assert provider.process(continuation_payload(waiting.id, step=1), reentry=scheduler).body is None
        assert scheduler.pending() == 1 and calls == [0, 1]
        # A copy that names the current step, or none (an earlier version's payload), re-schedules
        # itself for the due time as before: it may be the only one left.
        assert provider.process(continuation_payload(waiting.id, step=2), reentry=scheduler).body is None
        assert provider.process(continuation_payload(waiting.id), reentry=scheduler).body is None
        assert scheduler.pending() == 3 and calls == [0, 1]
    finally:
        scheduler.stop()
        provider.close()
    assert response_server.responses_for(event["RequestId"]) == []


@pytest.mark.slow
def test_an_overdue_operation_is_run_by_a_stale_reentry(tmp_path, response_server) -> None:
    """A stale copy finding the operation overdue (its own re-entry was lost) runs it, as recovery would."""
    provider, calls = _polled(f"sqlite:///{tmp_path / 'state.sqlite'}", 2, lambda attempt: 0)

    class Lost:
        """A re-entry path that loses the step-2 re-entry (and keeps the others for the test)."""

        name = "lossy"
        unavailable_reason: str | None = None

        def __init__(self) -> None:
            self.sent: list[str] = []

        def schedule(self, continuation_id: str, delay: float) -> None:
            self.sent.append(continuation_id)

    lossy = Lost()
    try:
        event = response_server.attach(make_event("Create", "Custom::Polled"))
        assert provider.process(event, reentry=lossy).body is None
        [step_1] = lossy.sent
        assert provider.process(continuation_payload(step_1), reentry=lossy).body is None
        assert calls == [0, 1] and [step_of(ref) for ref in lossy.sent] == [1, 2]
        time.sleep(1.1)  # step 2 is now overdue by more than a re-entry may be early (EARLY_TOLERANCE)
        outcome = provider.process(continuation_payload(step_1), reentry=lossy)
        assert outcome.body is not None and outcome.body["Status"] == "SUCCESS" and calls == [0, 1, 2]
    finally:
        provider.close()
    assert len(response_server.responses_for(event["RequestId"])) == 1


PROVIDER = textwrap.dedent('''
    from crhelper import InProgress, Provider, Request, Result

    provider = Provider()

    @provider.create("Custom::Cluster")
    def create(props, request):
        if request.attempt < 2:
            return InProgress(state=request.attempt, delay=3)
        return Result(physical_id="cluster-1", data={"Attempt": request.attempt})
''')


@pytest.mark.slow
def test_a_duplicated_fc_reentry_for_an_earlier_step_is_dropped(response_server, tmp_path) -> None:
    (tmp_path / "fc_stale_provider.py").write_text(PROVIDER)
    url = f"sqlite:///{tmp_path / 'state.sqlite'}"
    with LocalFunctionCompute(code_paths=[tmp_path], async_retry_delay=0.1) as fc:
        fc.register("crhelper", "stale", "fc_stale_provider:provider", timeout=20, env={"CRHELPER_STORE": url})
        client = fc.client()
        event = response_server.attach(make_event("Create", "Custom::Cluster"))
        client.invoke_function("crhelper", "stale", payload=json.dumps(event).encode(),
                               headers={"x-fc-invocation-type": "Async"})
        waiting = _wait_for_step(url, 2)
        # FC delivers the step-1 re-entry again, 3 s before step 2 is due: without its step it
        # would re-schedule itself (one more invocation, on every poll).
        client.invoke_function("crhelper", "stale", payload=continuation_payload(waiting.id, step=1),
                               headers={"x-fc-invocation-type": "Async"})
        body = response_server.wait_for(event["RequestId"], timeout=30)
        assert body["Status"] == "SUCCESS" and body["Data"] == {"Attempt": 2}
        assert fc.wait_idle(10)
        records = [r for r in fc.records if r.function == "stale"]
        # The request, its two re-entries and the duplicate: nothing more.
        assert len(records) == 4, [(r.invocation_type, r.delay, r.status) for r in records]
        assert all(r.status == "succeeded" for r in records)
    assert len(response_server.responses_for(event["RequestId"])) == 1
