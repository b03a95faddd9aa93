"""Timer trigger schedules and firing, as pure logic (a given clock, no threads or sockets)."""
from __future__ import annotations

import calendar
import json
import time

import pytest

from crhelper.local.fc_manage_timers import DueTimer, ScheduleError, TimerFiring, parse_schedule

START = calendar.timegm((2026, 12, 1, 22, 0, 0))  # a Tuesday


def shown(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %a", time.gmtime(epoch))


@pytest.mark.parametrize("expression, first", [
    ("0 0 4 * * *", "2026-12-02 04:00:00 Wed"),
    ("0 */5 * * * *", "2026-12-01 22:05:00 Tue"),
    ("30 0 0 1 1 *", "2027-01-01 00:00:30 Fri"),
    ("0 0 12 * * 0", "2026-12-06 12:00:00 Sun"),
    ("0 0 0 29 2 ?", "2028-02-29 00:00:00 Tue"),
    ("0 0 9 15 * 1", "2026-12-07 09:00:00 Mon"),  # both day fields set: either matches, as in cron
    ("0 10-20/5 22 * * *", "2026-12-01 22:10:00 Tue"),
    ("@every 4m", "2026-12-01 22:04:00 Tue"),
    ("@every 1h30m", "2026-12-01 23:30:00 Tue"),
])
def test_schedules_fire_when_fc_would(expression: str, first: str) -> None:
    assert shown(parse_schedule(expression).next_after(START)) == first


@pytest.mark.parametrize("expression, rule", [
    ("0 0 4 * *", "six fields"),
    ("61 * * * * *", "second field '61' must stay within 0-59"),
    ("0 x * * * *", "minute field 'x' must be"),
    ("@every 0s", "positive duration"),
    ("0 0 0 31 2 *", "never fires"),
    ("", "must be '@every <duration>'"),
])
def test_bad_schedules_say_which_part(expression: str, rule: str) -> None:
    with pytest.raises(ScheduleError, match=rule):
        parse_schedule(expression).next_after(START)


def test_due_timers_fire_once_per_period_with_fcs_event() -> None:
    every = DueTimer("", "fn", "tick", None, parse_schedule("@every 10s"), {"k": 1})
    listed = [every]
    fired: list[tuple[str, dict]] = []
    firing = TimerFiring(lambda: list(listed), lambda timer, event: fired.append((timer.trigger, json.loads(event))))
    assert firing.run_once(START) == 0  # first seen: scheduled, not fired
    assert firing.run_once(START + 9) == 0
    assert firing.run_once(START + 10) == 1 and firing.run_once(START + 11) == 0
    assert fired == [("tick", {"triggerTime": "2026-12-01T22:00:10Z", "triggerName": "tick", "payload": {"k": 1}})]
    listed.clear()  # deleted or disabled: forgotten
    assert firing.run_once(START + 30) == 0 and len(fired) == 1


def test_a_failing_fire_does_not_stop_the_others() -> None:
    def fire(timer: DueTimer, event: bytes) -> None:
        if timer.trigger == "bad":
            raise RuntimeError("function gone")
        seen.append(timer.trigger)

    seen: list[str] = []
    timers = [DueTimer("", "f", name, None, parse_schedule("@every 1s"), "") for name in ("bad", "good")]
    firing = TimerFiring(lambda: timers, fire)
    firing.run_once(START)
    assert firing.run_once(START + 1) == 1 and seen == ["good"]
