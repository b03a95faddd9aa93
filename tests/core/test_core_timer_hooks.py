"""Timer hooks (`Provider.on_timer`): a Function Compute time-trigger invocation recovers first, then
runs each hook with a deadline from the invocation's remaining time; a hook that raises is a log line
naming it and an Error in the summary, and the hooks after it still run (quick: in process)."""

from __future__ import annotations

import json
import logging
import time
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from crhelper import Provider

TIMER_EVENT = {"triggerTime": "2026-12-01T22:00:00Z", "triggerName": "crhelper-timer", "payload": ""}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture()
def records(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Records]:
    monkeypatch.setenv("CRHELPER_STORE", "none")
    handler = _Records()
    logger = logging.getLogger("crhelper")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _context(remaining_ms: int) -> Any:
    return SimpleNamespace(request_id="timer-1", function=SimpleNamespace(name="provider", timeout=60),
                           get_remaining_time_in_millis=lambda: remaining_ms)


def test_timer_hooks_run_in_order_under_the_invocations_deadline_and_a_failure_is_reported(records: _Records) -> None:
    provider = Provider()
    seen: list[tuple[str, float]] = []

    @provider.on_timer
    def first(deadline: float) -> dict[str, Any]:
        seen.append(("first", deadline))
        return {"Checked": 2}

    def broken(deadline: float) -> None:
        seen.append(("broken", deadline))
        raise RuntimeError("the backend is down")

    provider.on_timer(broken, name="health")
    provider.on_timer(lambda deadline: seen.append(("last", deadline)), name="last")

    before = time.monotonic()
    returned = json.loads(provider.fc_handler(json.dumps(TIMER_EVENT).encode(), _context(20_000)))
    assert returned == {"Recovered": 0, "Timers": {
        "test_timer_hooks_run_in_order_under_the_invocations_deadline_and_a_failure_is_reported.<locals>.first":
            {"Checked": 2},
        "health": {"Error": "RuntimeError: the backend is down"}, "last": None}}
    assert [name for name, _ in seen] == ["first", "broken", "last"]
    # 20 s remaining less the margin kept for returning (at most 5 s): the same deadline for each hook
    assert len({deadline for _, deadline in seen}) == 1
    assert before + 14.0 < seen[0][1] < time.monotonic() + 20.0
    failed = [r for r in records.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in failed] == ["timer hook health failed"]
    assert failed[0].exc_info is not None


def test_a_hook_past_the_deadline_is_skipped_and_without_hooks_the_summary_is_unchanged(records: _Records) -> None:
    provider = Provider()
    assert json.loads(provider.fc_handler(json.dumps(TIMER_EVENT), _context(20_000))) == {"Recovered": 0}

    provider.on_timer(lambda deadline: time.sleep(max(0.0, deadline - time.monotonic()) + 0.01), name="slow")
    provider.on_timer(lambda deadline: "ran", name="late")
    provider.on_timer(lambda deadline: "ran again", name="late")  # the same name replaces
    assert [name for name, _ in provider.timer_hooks] == ["slow", "late"]
    returned = json.loads(provider.fc_handler(json.dumps(TIMER_EVENT), _context(600)))
    assert returned["Timers"] == {"slow": None, "late": {"Skipped": "no time left in this invocation"}}
    assert any(r.getMessage() == "timer hook skipped: no time left" and r.fields["hook"] == "late"  # type: ignore[attr-defined]
               for r in records.records)
