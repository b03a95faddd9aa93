"""Pure state transitions of idempotency records, shared by every backend.

Backends read the current record, ask these functions what the next record is, and write it with
their own atomic primitive (an SQLite transaction, an S3 conditional create). Keeping the rules
here means both backends agree on every transition and the rules are testable without I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from .base import (
    ClaimResult,
    ClaimStatus,
    IdempotencyKey,
    IdempotencyRecord,
    RecordState,
)


def _check_positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0 seconds")


def decide_claim(
    current: IdempotencyRecord | None,
    key: IdempotencyKey,
    owner: str,
    now: float,
    lease_seconds: float,
    ttl_seconds: float,
    response_urls: Mapping[str, str] | None,
) -> tuple[ClaimResult, IdempotencyRecord | None]:
    """Return the claim outcome and the record to write (None when nothing must be written).

    An expired record counts as absent; a completed one is returned as is; a live lease of another
    owner is in flight; the same owner re-claiming extends its own lease; an expired lease is taken
    over and keeps the original created_at, expires_at and URLs unless new URLs are given.
    """
    _check_positive("lease_seconds", lease_seconds)
    _check_positive("ttl_seconds", ttl_seconds)
    if not owner:
        raise ValueError("owner must be a non-empty string")
    urls = dict(response_urls or {})
    if current is None or current.is_expired(now):
        version = 1 if current is None else current.version + 1
        fresh = IdempotencyRecord(
            key=key,
            state=RecordState.IN_PROGRESS,
            owner=owner,
            lease_expires_at=now + lease_seconds,
            created_at=now,
            expires_at=now + ttl_seconds,
            version=version,
            response_urls=urls,
        )
        return ClaimResult(ClaimStatus.ACQUIRED, fresh), fresh
    if current.state.done:
        return ClaimResult(ClaimStatus.COMPLETED, current), None
    if current.lease_live(now) and current.owner != owner:
        return ClaimResult(ClaimStatus.IN_FLIGHT, current), None
    status = ClaimStatus.ACQUIRED if current.owner == owner else ClaimStatus.TAKEN_OVER
    taken = dataclasses.replace(
        current,
        owner=owner,
        lease_expires_at=now + lease_seconds,
        version=current.version + 1,
        response_urls=urls or current.response_urls,
    )
    return ClaimResult(status, taken), taken


def _held_by(current: IdempotencyRecord | None, owner: str, now: float) -> bool:
    return (
        current is not None
        and not current.is_expired(now)
        and current.state is RecordState.IN_PROGRESS
        and current.owner == owner
    )


def renewed(
    current: IdempotencyRecord | None, owner: str, now: float, lease_seconds: float
) -> IdempotencyRecord | None:
    """The record with a fresh lease, or None when `owner` does not hold it.

    The TTL is stretched to cover the lease: an operation longer than the TTL must not lose its
    record mid-way (its completion would be refused and a duplicate would run it again).
    """
    _check_positive("lease_seconds", lease_seconds)
    if current is None or not _held_by(current, owner, now):
        return None
    lease_end = now + lease_seconds
    return dataclasses.replace(
        current,
        lease_expires_at=lease_end,
        expires_at=max(current.expires_at, lease_end),
        version=current.version + 1,
    )


def completed(
    current: IdempotencyRecord | None, owner: str, now: float, response: dict[str, Any]
) -> IdempotencyRecord | None:
    """The COMPLETED record carrying `response`, or None when `owner` does not hold it.

    An owner whose lease lapsed but was not taken over may still complete: nobody else ran.
    """
    if not isinstance(response, dict):
        raise TypeError("response must be a dict (the ROS response body)")
    if current is None or not _held_by(current, owner, now):
        return None
    return dataclasses.replace(
        current,
        state=RecordState.COMPLETED,
        response=response,
        lease_expires_at=now,
        version=current.version + 1,
    )


def delivered(current: IdempotencyRecord | None, owner: str, now: float) -> IdempotencyRecord | None:
    """The DELIVERED record, or None unless `owner` completed it (and it is not already marked)."""
    if (
        current is None
        or current.is_expired(now)
        or current.state is not RecordState.COMPLETED
        or current.owner != owner
    ):
        return None
    return dataclasses.replace(current, state=RecordState.DELIVERED, version=current.version + 1)


def adopted(current: IdempotencyRecord | None, owner: str, new_owner: str, now: float) -> IdempotencyRecord | None:
    """The COMPLETED (undelivered) record of `owner` handed to `new_owner`, who sends its answer
    again; None when it is not `owner`'s any more (another delivery adopted it first) or was delivered."""
    if (
        current is None
        or current.is_expired(now)
        or current.state is not RecordState.COMPLETED
        or current.owner != owner
        or not new_owner
    ):
        return None
    return dataclasses.replace(current, owner=new_owner, version=current.version + 1)


def may_release(current: IdempotencyRecord | None, owner: str, now: float) -> bool:
    """Only the holder of an IN_PROGRESS record may give it up."""
    return _held_by(current, owner, now)


Step = Callable[[IdempotencyRecord | None, float], IdempotencyRecord | None]


class AppliedTransitions:
    """The record-changing calls of `Store` for a backend whose `_apply(key, step)` reads the record,
    asks `step(current, now)` for the next one and writes it atomically (False when step refuses)."""

    def _apply(self, key: IdempotencyKey, step: Step) -> bool:
        raise NotImplementedError

    def renew(self, key: IdempotencyKey, owner: str, lease_seconds: float) -> bool:
        return self._apply(key, lambda current, now: renewed(current, owner, now, lease_seconds))

    def complete(self, key: IdempotencyKey, owner: str, response: dict[str, Any]) -> bool:
        return self._apply(key, lambda current, now: completed(current, owner, now, response))

    def mark_delivered(self, key: IdempotencyKey, owner: str) -> bool:
        return self._apply(key, lambda current, now: delivered(current, owner, now))

    def adopt(self, key: IdempotencyKey, owner: str, new_owner: str) -> bool:
        return self._apply(key, lambda current, now: adopted(current, owner, new_owner, now))
