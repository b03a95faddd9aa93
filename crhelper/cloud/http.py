"""The outbound policy of every HTTP client we write ourselves: the ResponseURL delivery
(`crhelper.outbound`), the Flynn controller client, the clients of the providers to come.

One `OutboundPolicy` says how long a connection and a read may take, how long a whole call may
take, how many attempts it gets, how they back off (exponential, full jitter, capped), which
answers are worth another attempt (connection trouble, 429, 5xx) and whether redirects are followed
(not unless allowed: a redirect could carry credentials elsewhere). A `RetrySchedule` applies it to
one call. URLs in errors and logs go through `crhelper.logs.redact_url`, the one redactor: a
presigned URL's query string is a credential. Standard library only.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urljoin

from ..logs import redact_url

#: Methods that may be sent again without changing the outcome (RFC 9110 idempotent methods).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})

Rand = Callable[[float, float], float]


@dataclass(frozen=True)
class OutboundPolicy:
    """Timeouts, a wall-clock budget, bounded retries with backoff and jitter, redirects."""

    connect_timeout: float = 5.0
    read_timeout: float = 15.0
    max_attempts: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    #: The longest one whole call may take, retries included; None derives it from the above.
    budget: float | None = None
    follow_redirects: bool = False

    def __post_init__(self) -> None:
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("OutboundPolicy: connect_timeout and read_timeout must be positive")
        if self.max_attempts < 1:
            raise ValueError(f"OutboundPolicy: max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_base < 0 or self.backoff_cap < 0:
            raise ValueError("OutboundPolicy: backoff_base and backoff_cap must not be negative")
        if self.budget is not None and self.budget <= 0:
            raise ValueError(f"OutboundPolicy: budget must be positive, got {self.budget}")

    @property
    def attempt_budget(self) -> float:
        """The longest one attempt may take, connect to the last byte read."""
        return self.connect_timeout + self.read_timeout

    @property
    def total_budget(self) -> float:
        """The longest a whole call may take: `budget`, else every attempt and every wait at most."""
        if self.budget is not None:
            return self.budget
        return self.max_attempts * self.attempt_budget + max(0, self.max_attempts - 1) * self.backoff_cap

    @staticmethod
    def retryable_status(status: int) -> bool:
        """429 and 5xx may succeed if repeated; any other status will not change."""
        return status == 429 or 500 <= status < 600

    def backoff(self, attempt: int, rand: Rand = random.uniform) -> float:
        """Exponential back-off with full jitter; `attempt` counts from 1."""
        exponent = min(max(0, attempt - 1), 64)  # 2**64 times any base is past every cap
        return rand(0.0, min(self.backoff_cap, self.backoff_base * (2 ** exponent)))

    def retry_delay(self, attempt: int, retry_after: float | None = None, rand: Rand = random.uniform) -> float:
        """The wait after failed attempt `attempt`: the peer's Retry-After if it gave one, else the
        jittered back-off; never more than the cap."""
        return min(retry_after if retry_after is not None else self.backoff(attempt, rand), self.backoff_cap)

    @staticmethod
    def retry_after(value: str | None) -> float | None:
        """A `Retry-After` header given in seconds; None when absent or an HTTP date."""
        return float(value) if value and value.strip().isdigit() else None

    def refused_redirect(self, status: int, location: str | None, base: str = "") -> str | None:
        """Why a 3xx answer ends the call (its target, resolved against the request's URL `base`,
        shown redacted), or None when redirects are allowed or `status` is no redirect."""
        if self.follow_redirects or not 300 <= status < 400:
            return None
        target = urljoin(base, location) if location else location
        return f"HTTP {status} redirect to {redact_url(target)} not followed (redirects are not allowed)"

    def schedule(self, *, ends: float | None = None, margin: float = 0.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 rand: Rand = random.uniform) -> "RetrySchedule":
        """The attempts of one call that must be over by `ends` (on `clock`; default: the total budget
        from now), keeping `margin` seconds spare."""
        return RetrySchedule(self, clock() + self.total_budget if ends is None else ends, margin, clock, sleep, rand)


class RetrySchedule:
    """One call's attempts under a policy: how long the next may take, whether another may start."""

    def __init__(self, policy: OutboundPolicy, ends: float, margin: float, clock: Callable[[], float],
                 sleep: Callable[[float], None], rand: Rand) -> None:
        self.policy = policy
        self.ends = ends
        self.attempts = 0
        self._margin = margin
        self._clock = clock
        self._sleep = sleep
        self._rand = rand

    @property
    def exhausted(self) -> bool:
        return self.attempts >= self.policy.max_attempts

    def begin(self) -> float:
        """Start an attempt and return the seconds it may take (its budget, cut to the time left).
        0 means no time is left: the attempt is not counted and must not be made."""
        left = self.ends - self._margin - self._clock()
        if left <= 0:
            return 0.0
        self.attempts += 1
        return min(self.policy.attempt_budget, left)

    def wait_for_retry(self, retry_after: float | None = None) -> bool:
        """Sleep before the next attempt and return True, or return False at once when that attempt
        would start too late to finish in time."""
        delay = self.policy.retry_delay(self.attempts, retry_after, self._rand)
        if self._clock() + delay + self._margin >= self.ends:
            return False
        self._sleep(delay)
        return True
