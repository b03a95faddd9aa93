"""In-process store: the rules of every backend (`transitions`) on two dicts under one lock.

For a store no other process shares anyway (a Function Compute instance's own default, tests): the
same duplicate absorption as an in-memory SQLite database without `sqlite3`, a schema or SQL on a
cold start. Values are copied through JSON on the way in and out, as a backend that stores
documents would, so a caller's later changes never reach what is stored.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, Callable, Mapping

from . import transitions
from .base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_TTL_SECONDS,
    ClaimResult,
    Continuation,
    IdempotencyKey,
    IdempotencyRecord,
    StoreConflict,
)


def _copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _copied_record(record: IdempotencyRecord) -> IdempotencyRecord:
    return dataclasses.replace(record, response=_copy(record.response), response_urls=_copy(record.response_urls))


def _copied_continuation(continuation: Continuation, version: int | None = None) -> Continuation:
    return dataclasses.replace(continuation, request=_copy(continuation.request), state=_copy(continuation.state),
                               version=continuation.version if version is None else version)


class MemoryStore(transitions.AppliedTransitions):
    """`Store` private to this process (`memory://`); everything is lost when it ends."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[IdempotencyKey, IdempotencyRecord] = {}
        self._continuations: dict[str, Continuation] = {}

    # -- idempotency records -------------------------------------------------------------

    def claim(
        self,
        key: IdempotencyKey,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        response_urls: Mapping[str, str] | None = None,
    ) -> ClaimResult:
        with self._lock:
            result, to_write = transitions.decide_claim(
                self._records.get(key), key, owner, self._clock(), lease_seconds, ttl_seconds, response_urls
            )
            if to_write is not None:
                self._records[key] = _copied_record(to_write)
            return result

    def claim_with_continuation(
        self,
        key: IdempotencyKey,
        continuation: Continuation,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> ClaimResult:
        stored = _copied_continuation(continuation)
        with self._lock:
            if continuation.id in self._continuations:
                raise StoreConflict("continuation id already exists")
            result, to_write = transitions.decide_claim(
                self._records.get(key), key, continuation.id, self._clock(), lease_seconds, ttl_seconds, None
            )
            if to_write is not None:
                self._records[key] = _copied_record(to_write)
            if result.owns:
                self._continuations[continuation.id] = stored
            return result

    def mark_delivered_and_delete(self, key: IdempotencyKey, owner: str, continuation_id: str) -> bool:
        with self._lock:
            new = transitions.delivered(self._records.get(key), owner, self._clock())
            if new is not None:
                self._records[key] = _copied_record(new)
            self._continuations.pop(continuation_id, None)
            return new is not None

    def _apply(self, key: IdempotencyKey, step: transitions.Step) -> bool:
        with self._lock:
            new = step(self._records.get(key), self._clock())
            if new is None:
                return False
            self._records[key] = _copied_record(new)
            return True

    def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        with self._lock:
            record = self._records.get(key)
        if record is None or record.is_expired(self._clock()):
            return None
        return _copied_record(record)

    def release(self, key: IdempotencyKey, owner: str) -> bool:
        with self._lock:
            current = self._records.get(key)
            if current is None or not transitions.may_release(current, owner, self._clock()):
                return False
            del self._records[key]
            return True

    def purge_expired(self) -> int:
        with self._lock:
            now = self._clock()
            expired = [key for key, record in self._records.items() if record.expires_at <= now]
            for key in expired:
                del self._records[key]
            return len(expired)

    # -- continuations -------------------------------------------------------------------

    def put_continuation(self, continuation: Continuation) -> None:
        stored = _copied_continuation(continuation)
        with self._lock:
            if continuation.id in self._continuations:
                raise StoreConflict("continuation id already exists")
            self._continuations[continuation.id] = stored

    def get_continuation(self, continuation_id: str) -> Continuation | None:
        with self._lock:
            continuation = self._continuations.get(continuation_id)
        return None if continuation is None else _copied_continuation(continuation)

    def update_continuation(self, continuation: Continuation, expected_version: int) -> bool:
        stored = _copied_continuation(continuation, version=expected_version + 1)
        with self._lock:
            current = self._continuations.get(continuation.id)
            if current is None or current.version != expected_version:
                return False
            self._continuations[continuation.id] = stored
            return True

    def delete_continuation(self, continuation_id: str) -> bool:
        with self._lock:
            return self._continuations.pop(continuation_id, None) is not None

    def due_continuations(self, now: float, limit: int = 100) -> list[Continuation]:
        with self._lock:
            due = sorted((c for c in self._continuations.values() if c.next_run_at <= now),
                         key=lambda c: (c.next_run_at, c.id))[: max(limit, 0)]
        return [_copied_continuation(c) for c in due]

    def close(self) -> None:
        """Nothing to release; what was stored stays readable until the object is dropped."""
