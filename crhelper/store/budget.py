"""How long a store call may wait: the time left before the invocation must answer.

A store that waits past the deadline (a locked SQLite file, a slow OSS) would leave no time to send
FAILED. The runtime sets the deadline for the calls it makes; backends that can bound a wait read it.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from typing import Iterator

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("crhelper_store_deadline", default=None)


@contextlib.contextmanager
def store_deadline(until: float | None) -> Iterator[None]:
    """Store calls inside wait at most until `until` (time.monotonic()); None leaves them unbounded."""
    token = _deadline.set(until)
    try:
        yield
    finally:
        _deadline.reset(token)


def seconds_left(default: float) -> float:
    """The wait allowed now: `default`, or less when a deadline is closer (never below zero)."""
    until = _deadline.get()
    if until is None:
        return default
    return max(0.0, min(default, until - time.monotonic()))
