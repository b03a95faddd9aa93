"""A thread-safe journal of invocations, so tests can see what ran, when and how it ended."""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

PENDING = "pending"
SUCCEEDED = "succeeded"
FAILED = "failed"
DROPPED = "dropped"


@dataclass(frozen=True)
class AttemptRecord:
    """One execution of the handler; `outcome` is 'success', 'error' or 'timeout'.

    `log_tail` holds the last 4 KB of the attempt's log (FC would ship it to SLS); `result` the
    first 4 KB of what the handler returned (a caller can tell "answered" from "still working").
    """

    number: int
    started: float
    ended: float
    outcome: str
    error_type: str | None = None
    error_message: str | None = None
    log_tail: bytes = b""
    result: bytes = b""


@dataclass(frozen=True)
class InvocationRecord:
    """An accepted request; times are epoch seconds. `status`: pending/succeeded/failed/dropped."""

    request_id: str
    service: str
    function: str
    qualifier: str | None
    invocation_type: str
    delay: int
    received: float
    status: str = PENDING
    attempts: tuple[AttemptRecord, ...] = ()

    @property
    def first_started(self) -> float | None:
        return self.attempts[0].started if self.attempts else None


class InvocationJournal:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, InvocationRecord] = {}

    def open(self, record: InvocationRecord) -> None:
        with self._lock:
            self._records[record.request_id] = record

    def add_attempt(self, request_id: str, attempt: AttemptRecord) -> None:
        with self._lock:
            record = self._records[request_id]
            self._records[request_id] = dataclasses.replace(
                record, attempts=record.attempts + (attempt,))

    def settle(self, request_id: str, status: str) -> None:
        with self._lock:
            self._records[request_id] = dataclasses.replace(self._records[request_id], status=status)

    def get(self, request_id: str) -> InvocationRecord:
        with self._lock:
            return self._records[request_id]

    def snapshot(self) -> list[InvocationRecord]:
        """Records in the order they were received."""
        with self._lock:
            return list(self._records.values())
