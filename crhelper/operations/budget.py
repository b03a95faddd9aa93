"""Time inside a long operation: clocks tests can drive, the budget of one step, and the waits and
one-off calls that survive re-entry (pure but for the clock)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from typing import Any, Callable, Protocol, TypeVar

from ..errors import Failure
from ..store.budget import seconds_left

T = TypeVar("T")

#: A check due this close (s) is made now rather than after another pause.
CHECK_TOLERANCE = 0.05
#: What a step leaves unspent of the invocation's time: the lifecycle still stores the continuation
#: and schedules the next call after the step returns.
INVOCATION_RESERVE = 1.0


class Clock(Protocol):
    """Where an operation reads the time. `defer` turns a wait on this clock into the real delay of
    the next call: the system clock waits for real; a test clock lets its own time pass at once."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def defer(self, seconds: float) -> float: ...


class SystemClock:
    """POSIX time, real sleeps, real delays."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def defer(self, seconds: float) -> float:
        return seconds


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that tests drive: `sleep` and `defer` advance it at once (`defer` asks for
    `real_delay` real seconds before the next call), `advance` moves it by hand. Thread-safe."""

    def __init__(self, start: float = 1_000_000.0, real_delay: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.real_delay = real_delay

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += max(0.0, seconds)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def defer(self, seconds: float) -> float:
        self.advance(seconds)
        return self.real_delay


class NotYet(BaseException):
    """Raised by a wait that is not satisfied yet: this call of the step (or of a tier's item) ends
    and is made again in `delay` seconds. A BaseException, like GeneratorExit, so that an
    `except Exception` in provider code does not swallow it."""

    def __init__(self, delay: float, name: str = "") -> None:
        super().__init__(f"waiting for {name or 'a condition'}: next check in {delay:g} s")
        self.delay = max(0.0, delay)
        self.name = name


class WaitTimeout(Failure):
    """A wait ran out of time; uncaught, the request is answered FAILED with this reason."""


@dataclasses.dataclass
class WaitRecord:
    """A named wait across calls: when it began, how many checks failed, when the next is due,
    whether it was met."""

    since: float
    checks: int = 0
    next_at: float | None = None
    done: bool = False


@dataclasses.dataclass
class Memory:
    """What a scope (the operation, or one tier item) remembers between calls: waits and one-off results."""

    waits: dict[str, WaitRecord] = dataclasses.field(default_factory=dict)
    memo: dict[str, Any] = dataclasses.field(default_factory=dict)


def _invocation_left() -> float:
    """Seconds until the invocation must answer (inf where nothing bounds it, e.g. `serve`)."""
    return seconds_left(math.inf)


class Budget:
    """The time of one step and the memory of its scope, handed to a step function (and, as an
    ItemRun, to each tier item).

    `left()` is what remains of this step: the per-step budget (`step_seconds`) or the invocation's
    own time, whichever ends first. `deadline` is when the whole operation must be done (on `clock`).
    `wait_until` and `once` keep their progress in the scope's Memory, which is stored with the
    operation's state, so they carry on where they were after a re-entry.
    """

    def __init__(
        self,
        *,
        clock: Clock,
        step_started: float,
        step_seconds: float,
        deadline: float,
        memory: Memory,
        limit: float | None = None,
        limit_reason: str = "",
        invocation_left: Callable[[], float] = _invocation_left,
    ) -> None:
        self.clock = clock
        self.step_started = step_started
        self.step_seconds = step_seconds
        self.deadline = deadline
        self.memory = memory
        self._limit = limit
        self._limit_reason = limit_reason
        #: Seconds until the invocation must answer; the tier runner hands it on to its items.
        self.invocation_left = invocation_left

    def now(self) -> float:
        return self.clock.now()

    def left(self) -> float:
        """Seconds left in this step (never below zero)."""
        step = self.step_started + self.step_seconds - self.clock.now()
        return max(0.0, min(step, self.invocation_left() - INVOCATION_RESERVE))

    def deadline_left(self) -> float:
        """Seconds until the operation's deadline (never below zero)."""
        return max(0.0, self.deadline - self.clock.now())

    def wait_until(self, probe: Callable[[], Any], *, every: float, up_to: float | None = None, name: str) -> None:
        """Return once `probe()` is true; until then end this call (NotYet) to check again in `every`
        seconds, in this invocation while the step has time, else in a later one. After `up_to`
        seconds from the first check (or at the scope's limit, a tier's timeout) raise WaitTimeout.
        A wait once met stays met for the operation: `probe` is not called again under that `name`."""
        if not (isinstance(every, (int, float)) and every > 0):
            raise ValueError(f"wait_until({name!r}): every must be a positive number of seconds, got {every!r}")
        record = self.memory.waits.get(name)
        if record is not None and record.done:
            return
        now = self.clock.now()
        if record is None:
            record = self.memory.waits[name] = WaitRecord(since=now)
        elif record.next_at is not None and now < record.next_at - CHECK_TOLERANCE:
            raise NotYet(record.next_at - now, name)  # called again early (another wait of the tier was due)
        if probe():
            record.done = True
            return
        record.checks += 1
        ends, why = self._end_of(record, up_to)
        if ends is not None and now >= ends:
            raise WaitTimeout(f"{name}: {why} ({record.checks} check(s))")
        delay = every if ends is None else min(every, ends - now)
        record.next_at = now + delay
        raise NotYet(delay, name)

    def _end_of(self, record: WaitRecord, up_to: float | None) -> tuple[float | None, str]:
        own = record.since + up_to if up_to is not None else None
        if self._limit is not None and (own is None or self._limit < own):
            return self._limit, self._limit_reason or "out of time"
        return own, f"not ready after {up_to:,.0f} s" if up_to is not None else ""

    def once(self, name: str, call: Callable[[], T]) -> T:
        """`call()` the first time this `name` is reached in the operation; its result (JSON) is
        remembered and returned on every later call, in this invocation and after re-entry."""
        memo = self.memory.memo
        if name not in memo:
            memo[name] = json_value(call(), f"once({name!r})")
        result: T = memo[name]
        return result


def json_value(value: Any, what: str) -> Any:
    """`value` as it will read back after a re-entry (tuples become lists); TypeError if it is not JSON."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what}: the result must be JSON-serialisable to be remembered: {exc}") from None
