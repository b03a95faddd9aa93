"""Timer triggers of the local Function Compute: schedules parsed as FC writes them, and a thread
that fires each enabled trigger as FC does, with an async invocation whose event is
`{"triggerTime", "triggerName", "payload"}`.

Schedules: `@every <duration>` (Go style: `30s`, `4m`, `1h30m`; FC asks for at least a minute,
the local endpoint takes any positive duration so tests run in seconds), or a six-field cron
expression in UTC, `second minute hour day-of-month month day-of-week`, each field `*`, `?`, a
number, a range `a-b`, a step `*/n` or `a-b/n`, or a list of those (day of week 0-6, Sunday 0;
with both day fields restricted, either may match, as in cron).
"""
from __future__ import annotations

import calendar
import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

_log = logging.getLogger(__name__)

_EVERY = re.compile(r"^@every\s+((?:\d+(?:\.\d+)?(?:h|m|s))+)$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0}
#: (name, low, high) of the six cron fields.
_FIELDS = (("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12),
           ("day of week", 0, 6))
#: How far ahead a cron expression is searched (a day-of-month that never comes, such as 31 February).
_HORIZON_DAYS = 366 * 5


class ScheduleError(ValueError):
    """The expression is not a schedule; the message says which part and why."""


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base in ("*", "?"):
                start, end = low, high
            elif "-" in base:
                first, _, last = base.partition("-")
                start, end = int(first), int(last)
            else:
                start = int(base)
                end = high if step_text else start
        except ValueError:
            raise ScheduleError(f"the {name} field {text!r} must be *, a number, a range a-b or a step */n") from None
        if step < 1 or not low <= start <= end <= high:
            raise ScheduleError(f"the {name} field {text!r} must stay within {low}-{high} with a step of 1 or more")
        values.update(range(start, end + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Schedule:
    """When a trigger fires: every `interval` seconds, or at the times a cron expression names."""

    interval: float | None = None
    fields: tuple[frozenset[int], ...] = ()

    def next_after(self, now: float) -> float:
        """The first firing time strictly after `now` (epoch seconds)."""
        if self.interval is not None:
            return now + self.interval
        return _next_cron(self.fields, int(now) + 1)


def parse_schedule(expression: Any) -> Schedule:
    if not isinstance(expression, str) or not expression.strip():
        raise ScheduleError("must be '@every <duration>' or a six-field cron expression")
    text = expression.strip()
    every = _EVERY.match(text)
    if every is not None:
        seconds = sum(float(n) * _UNIT[u] for n, u in _DURATION_PART.findall(every.group(1)))
        if seconds <= 0:
            raise ScheduleError("@every needs a positive duration")
        return Schedule(interval=seconds)
    parts = text.split()
    if len(parts) != 6:
        raise ScheduleError(f"a cron expression has six fields (second minute hour day month weekday), got {len(parts)}")
    return Schedule(fields=tuple(_field(p, *spec) for p, spec in zip(parts, _FIELDS)))


def _day_matches(days: frozenset[int], weekdays: frozenset[int], day: int, weekday: int) -> bool:
    """As cron (and FC's Go scheduler): with both day fields restricted, either one may match."""
    if len(days) < 31 and len(weekdays) < 7:
        return day in days or weekday in weekdays
    return day in days and weekday in weekdays


def _next_cron(fields: tuple[frozenset[int], ...], start: int) -> float:
    seconds, minutes, hours, days, months, weekdays = fields
    t = start
    limit = start + _HORIZON_DAYS * 86400
    while t < limit:
        tm = time.gmtime(t)
        if tm.tm_mon not in months:  # to the first second of the next month
            year, month = (tm.tm_year + 1, 1) if tm.tm_mon == 12 else (tm.tm_year, tm.tm_mon + 1)
            t = calendar.timegm((year, month, 1, 0, 0, 0))
            continue
        if not _day_matches(days, weekdays, tm.tm_mday, (tm.tm_wday + 1) % 7):  # gmtime: Monday 0; cron: Sunday 0
            t = calendar.timegm((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0)) + 86400
            continue
        if tm.tm_hour not in hours:
            t = t - tm.tm_min * 60 - tm.tm_sec + 3600
            continue
        if tm.tm_min not in minutes:
            t = t - tm.tm_sec + 60
            continue
        if tm.tm_sec not in seconds:
            t += 1
            continue
        return float(t)
    raise ScheduleError("the cron expression never fires")


def timer_event(trigger_name: str, fired_at: float, payload: Any) -> bytes:
    """The event FC's time trigger sends."""
    return json.dumps({"triggerTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(fired_at)),
                       "triggerName": trigger_name, "payload": payload if payload is not None else ""}).encode("utf-8")


@dataclass(frozen=True)
class DueTimer:
    """One enabled timer trigger: which function, and its schedule."""

    service: str
    function: str
    trigger: str
    qualifier: str | None
    schedule: Schedule
    payload: Any


class TimerFiring:
    """Fires due timers through `fire(timer, event)`; `timers()` lists the enabled ones (read each
    round, so created, changed and deleted triggers take effect at once)."""

    def __init__(self, timers: Callable[[], list[DueTimer]], fire: Callable[[DueTimer, bytes], None], *,
                 clock: Callable[[], float] = time.time, tick: float = 0.2) -> None:
        self._timers = timers
        self._fire = fire
        self._clock = clock
        self._tick = tick
        self._next: dict[tuple[str, str, str, Schedule], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fc-timers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def run_once(self, now: float) -> int:
        """Fire what is due at `now`; returns how many fired."""
        fired = 0
        live: set[tuple[str, str, str, Schedule]] = set()
        for timer in self._timers():
            key = (timer.service, timer.function, timer.trigger, timer.schedule)
            live.add(key)
            due = self._next.get(key)
            if due is None:
                self._next[key] = timer.schedule.next_after(now)
                continue
            if due <= now:
                self._next[key] = timer.schedule.next_after(now)
                try:
                    self._fire(timer, timer_event(timer.trigger, due, timer.payload))
                    fired += 1
                except Exception:  # noqa: BLE001 - one failing trigger must not stop the others
                    _log.exception("timer trigger %s of %s could not fire", timer.trigger, timer.function)
        for key in set(self._next) - live:
            del self._next[key]
        return fired

    def _loop(self) -> None:
        while not self._stop.wait(self._tick):
            self.run_once(self._clock())
