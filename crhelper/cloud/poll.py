"""Poll until done, once for every provider: backoff from an initial interval up to a cap, bounded
by two clocks.

* The **deadline** is the whole operation's (ROS's Timeout, the type's deadline): once it passes
  the operation has failed.
* The **budget** is this invocation's share (a function lasts minutes, an instance boot or a cluster
  may take an hour): when it runs out the answer is `OutOfBudget`, with the delay and the interval to
  continue from, so the provider returns `InProgress` and a later invocation resumes the backoff.

A probe looks once and says `Done(value)`, `Waiting(state)` or `OffPath(reason)` (a state the
operation can never reach its goal from, e.g. an instance that went to `Stopped` while starting).
Errors the caller calls transient (throttling, 5xx; see `is_throttling_or_server_error`) are retried
on the same schedule; any other exception propagates. Clock and sleep are injectable, so tests
drive a whole schedule without waiting.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, TypeVar, Union

from ..config import env_float

T = TypeVar("T")


@dataclass(frozen=True)
class PollSettings:
    """The backoff schedule: `initial` seconds, times `factor` after each look, at most `cap`."""

    initial: float = 1.0
    cap: float = 10.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap:
            raise ValueError(f"PollSettings: need 0 < initial <= cap, got initial={self.initial} cap={self.cap}")
        if self.factor < 1:
            raise ValueError(f"PollSettings: factor must be at least 1, got {self.factor}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "PollSettings":
        """`CRHELPER_POLL_INITIAL` (1 s) and `CRHELPER_POLL_CAP` (10 s)."""
        env = os.environ if env is None else env
        initial = env_float(env, "CRHELPER_POLL_INITIAL", 1.0, minimum=0.001)
        return cls(initial=initial, cap=env_float(env, "CRHELPER_POLL_CAP", max(10.0, initial), minimum=initial))

    def next_interval(self, interval: float) -> float:
        return min(self.cap, interval * self.factor)


# --- what a probe reports ------------------------------------------------------------------------

@dataclass(frozen=True)
class Done(Generic[T]):
    """The operation reached its goal; `value` is what the caller wants back (ids, addresses...)."""

    value: T


@dataclass(frozen=True)
class Waiting:
    """Still on the way; `state` says where (`Starting`), for the log and the final reason."""

    state: str = ""


@dataclass(frozen=True)
class OffPath:
    """The operation can no longer reach its goal; `reason` says why, for a FAILED Reason."""

    reason: str


Observation = Union[Done[T], Waiting, OffPath]


# --- what polling returns ------------------------------------------------------------------------

@dataclass(frozen=True)
class Finished(Generic[T]):
    value: T
    polls: int


@dataclass(frozen=True)
class OutOfBudget:
    """This invocation's budget ran out first: continue in `delay` seconds with `interval`."""

    state: str
    polls: int
    delay: float
    interval: float


@dataclass(frozen=True)
class PollFailed:
    """`off_path` when the probe said so; otherwise the deadline passed (`reason` names the last state)."""

    reason: str
    polls: int
    off_path: bool = False


PollResult = Union[Finished[T], OutOfBudget, PollFailed]


def poll(
    probe: Callable[[], Observation[T]],
    *,
    deadline: float,
    budget_ends: float | None = None,
    settings: PollSettings = PollSettings(),
    interval: float | None = None,
    transient: Callable[[Exception], bool] = lambda exc: False,
    what: str = "the operation",
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> PollResult[T]:
    """Call `probe` until it is done, off path, or out of time; never sleeps past either bound.

    `deadline` and `budget_ends` are instants on `clock` (epoch seconds by default, so a deadline
    stored in a long operation's state means the same in the next invocation). `interval` resumes a
    schedule from a `OutOfBudget`. The first look happens at once; when the next one would fall after
    the deadline, the last look is made at the deadline itself.
    """
    current = settings.initial if interval is None else min(settings.cap, max(settings.initial, interval))
    ends = deadline if budget_ends is None else min(deadline, budget_ends)
    now = clock()
    if now >= deadline:
        return PollFailed(f"{what} did not finish before its deadline (not looked at)", 0)
    if now >= ends:
        return OutOfBudget("not looked at", 0, 0.0, current)
    polls, last_look = 0, False
    while True:
        polls += 1
        try:
            seen = probe()
        except Exception as exc:
            if not transient(exc):
                raise
            state = f"transient error {type(exc).__name__}: {exc}"[:300]
        else:
            if isinstance(seen, Done):
                return Finished(seen.value, polls)
            if isinstance(seen, OffPath):
                return PollFailed(seen.reason, polls, off_path=True)
            state = seen.state or "waiting"
        now = clock()
        if last_look or now >= deadline:
            return PollFailed(f"{what} did not finish before its deadline (last state: {state})", polls)
        due = now + current
        if due >= deadline:
            due, last_look = deadline, True
        if due > ends:
            return OutOfBudget(state, polls, due - now, settings.next_interval(current))
        sleep(due - now)
        current = settings.next_interval(current)


def is_throttling_or_server_error(exc: Exception) -> bool:
    """The transient errors of the Alibaba Tea SDKs and `cs`: an error code starting `Throttling`,
    an HTTP 429 or 5xx status. Read from the SDK exceptions' own fields (`code`, `status_code`;
    `cs` keeps the response on `.response`), so no SDK is imported here."""
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code.startswith("Throttling"):
        return True
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return isinstance(status, int) and (status == 429 or 500 <= status < 600)
