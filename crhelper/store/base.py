"""The store contract: record types and the `Store` protocol every backend implements.

Two kinds of state live in a store, and only there:

* idempotency records, one per delivered request (StackId + RequestId + LogicalResourceId), so a
  duplicate delivery never runs the handler twice and a late duplicate re-sends the stored answer;
* continuations of long-running handlers, which carry the original request (ResponseURLs included)
  so that re-invocation payloads only need the continuation's unguessable id.

Secrets (ResponseURLs, the request) are excluded from ``repr`` so a logged record leaks nothing.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

from ..config import ReadOnly

#: How long an idempotency record is kept after its creation (seconds).
DEFAULT_TTL_SECONDS = 24 * 3600
#: How long an owner may hold a claim without renewing it before others may take it over.
DEFAULT_LEASE_SECONDS = 60


class StoreError(RuntimeError):
    """The store could not be used (bad setting, unreachable backend, corrupt record)."""


class StoreConflict(StoreError):
    """A create found an existing object it must not overwrite (e.g. a reused continuation id)."""


class RecordState(str, enum.Enum):
    """Life cycle of one delivered request."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    #: Completed, and its answer reached the ResponseURL: a later duplicate need not be answered again.
    DELIVERED = "DELIVERED"

    @property
    def done(self) -> bool:
        """The request has its final answer (delivered or not)."""
        return self is not RecordState.IN_PROGRESS


class ClaimStatus(str, enum.Enum):
    """What `Store.claim` found; only ACQUIRED and TAKEN_OVER allow running the handler."""

    ACQUIRED = "acquired"
    IN_FLIGHT = "in_flight"
    COMPLETED = "completed"
    TAKEN_OVER = "taken_over"

    @property
    def owns(self) -> bool:
        """True when the caller now owns the request and must run (or resume) it."""
        return self in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER)


@dataclass(frozen=True)
class IdempotencyKey:
    """Identity of one ROS request; ROS reuses RequestId across resources, hence the triple."""

    stack_id: str
    request_id: str
    logical_resource_id: str

    def __post_init__(self) -> None:
        for name in ("stack_id", "request_id", "logical_resource_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"IdempotencyKey.{name} must be a non-empty string")

    @classmethod
    def from_request(cls, request: Mapping[str, Any]) -> "IdempotencyKey":
        """Build the key from a ROS request dict (StackId, RequestId, LogicalResourceId)."""
        return cls(
            stack_id=str(request.get("StackId") or ""),
            request_id=str(request.get("RequestId") or ""),
            logical_resource_id=str(request.get("LogicalResourceId") or ""),
        )

    def digest(self) -> str:
        """A fixed-length, path-safe name for backends whose keys cannot hold ARNs verbatim."""
        import hashlib  # only the OSS store names objects by digest: off every other cold start

        raw = json.dumps([self.stack_id, self.request_id, self.logical_resource_id])
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class IdempotencyRecord:
    """The stored state of one request; `version` grows by one on every write."""

    key: IdempotencyKey
    state: RecordState
    owner: str
    lease_expires_at: float
    created_at: float
    expires_at: float
    version: int = 1
    response: dict[str, Any] | None = None
    response_urls: dict[str, str] = field(default_factory=dict, repr=False)

    def is_expired(self, now: float) -> bool:
        """Past its TTL: treated as absent and removed by `purge_expired`."""
        return now >= self.expires_at

    def lease_live(self, now: float) -> bool:
        """An IN_PROGRESS owner still holds the request."""
        return self.state is RecordState.IN_PROGRESS and now < self.lease_expires_at

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form used by backends that store documents."""
        return {
            "stack_id": self.key.stack_id,
            "request_id": self.key.request_id,
            "logical_resource_id": self.key.logical_resource_id,
            "state": self.state.value,
            "owner": self.owner,
            "lease_expires_at": self.lease_expires_at,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "version": self.version,
            "response": self.response,
            "response_urls": dict(self.response_urls),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "IdempotencyRecord":
        """Inverse of `to_dict`; raises StoreError naming the missing field."""
        try:
            return cls(
                key=IdempotencyKey(
                    data["stack_id"], data["request_id"], data["logical_resource_id"]
                ),
                state=RecordState(data["state"]),
                owner=str(data["owner"]),
                lease_expires_at=float(data["lease_expires_at"]),
                created_at=float(data["created_at"]),
                expires_at=float(data["expires_at"]),
                version=int(data["version"]),
                response=data.get("response"),
                response_urls=dict(data.get("response_urls") or {}),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise StoreError(
                f"stored idempotency record has a missing or invalid field: {exc}"
            ) from None


class ClaimResult(ReadOnly):
    """Outcome of `Store.claim` plus the record as it stands after the claim."""

    __slots__ = ("status", "record")
    status: ClaimStatus
    record: IdempotencyRecord

    def __init__(self, status: ClaimStatus, record: IdempotencyRecord) -> None:
        self._init(status=status, record=record)

    @property
    def owns(self) -> bool:
        """True when the caller must run the handler."""
        return self.status.owns


_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def check_continuation_id(continuation_id: str) -> None:
    """Ids become object keys, so only URL-safe characters (what `new_continuation_id` makes)."""
    if (
        not isinstance(continuation_id, str)
        or not 1 <= len(continuation_id) <= 128
        or not set(continuation_id) <= _ID_CHARS
    ):
        raise ValueError("Continuation.id must be 1-128 characters of A-Z a-z 0-9 _ -")


def new_continuation_id() -> str:
    """An unguessable id (192 random bits): it is all a re-invocation payload carries. What
    `secrets.token_urlsafe(24)` does, without importing `secrets` (and `hmac`, `hashlib`) for it."""
    return base64.urlsafe_b64encode(os.urandom(24)).rstrip(b"=").decode("ascii")


#: `Continuation.attempt` of a finished operation's marker (real attempts count up from 0): its answer
#: may not have reached ROS, so a redelivered re-entry sends it again.
FINISHED_ATTEMPT = -1
#: The marker of a finished operation whose answer was delivered: a redelivered re-entry sends nothing.
DELIVERED_ATTEMPT = -2


@dataclass(frozen=True)
class Continuation:
    """A long-running handler between polls; `version` guards against double advancement."""

    id: str
    request: dict[str, Any] = field(repr=False)
    state: Any
    attempt: int
    started_at: float
    deadline: float
    next_run_at: float
    version: int = 1
    #: The process running a step now (`crhelper.holder.current()`), "" between steps; while it is
    #: set, `next_run_at` is the end of the step's lease, renewed by the holder while it works.
    holder: str = ""

    def __post_init__(self) -> None:
        check_continuation_id(self.id)

    @property
    def finished(self) -> bool:
        """A marker kept after the operation completed, so a redelivered re-entry can re-send the answer."""
        return self.attempt in (FINISHED_ATTEMPT, DELIVERED_ATTEMPT)

    @property
    def delivered(self) -> bool:
        """A finished marker whose answer reached the ResponseURL."""
        return self.attempt == DELIVERED_ATTEMPT

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form used by backends that store documents."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Continuation":
        """Inverse of `to_dict`; raises StoreError naming the problem."""
        try:
            return cls(
                id=str(data["id"]),
                request=dict(data["request"]),
                state=data.get("state"),
                attempt=int(data["attempt"]),
                started_at=float(data["started_at"]),
                deadline=float(data["deadline"]),
                next_run_at=float(data["next_run_at"]),
                version=int(data["version"]),
                holder=str(data.get("holder") or ""),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise StoreError(f"stored continuation has a missing or invalid field: {exc}") from None


@runtime_checkable
class Store(Protocol):
    """Persistence for idempotency records and continuations.

    Every method is atomic with respect to other processes using the same store URL. Times are
    POSIX seconds from the store's clock. Writes that lose a race return False (or a non-owning
    ClaimResult); they never raise for a lost race.
    """

    def claim(
        self,
        key: IdempotencyKey,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        response_urls: Mapping[str, str] | None = None,
    ) -> ClaimResult:
        """Create the record IN_PROGRESS for `owner` unless a live or completed one exists."""
        ...

    def claim_with_continuation(
        self,
        key: IdempotencyKey,
        continuation: Continuation,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> ClaimResult:
        """`claim(key, continuation.id, ...)` and, only when the claim owns the request,
        `put_continuation(continuation)`, as one write: a fresh request costs one transaction, and a
        crash leaves both or neither. Raises StoreConflict (claiming nothing) if the id exists."""
        ...

    def renew(self, key: IdempotencyKey, owner: str, lease_seconds: float) -> bool:
        """Extend the owner's lease; False if `owner` no longer holds an IN_PROGRESS record."""
        ...

    def complete(self, key: IdempotencyKey, owner: str, response: dict[str, Any]) -> bool:
        """Store the final response; False if `owner` no longer holds an IN_PROGRESS record."""
        ...

    def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        """The unexpired record, or None."""
        ...

    def release(self, key: IdempotencyKey, owner: str) -> bool:
        """Drop an IN_PROGRESS claim without completing it, so a redelivery may run at once."""
        ...

    def mark_delivered(self, key: IdempotencyKey, owner: str) -> bool:
        """Record that the COMPLETED answer of `owner` reached the ResponseURL; False otherwise."""
        ...

    def mark_delivered_and_delete(self, key: IdempotencyKey, owner: str, continuation_id: str) -> bool:
        """`mark_delivered(key, owner)` and `delete_continuation(continuation_id)` (whatever the mark
        found) as one write: the end of a request answered in its first call. Returns the mark's result."""
        ...

    def adopt(self, key: IdempotencyKey, owner: str, new_owner: str) -> bool:
        """Hand the COMPLETED, undelivered record of `owner` to `new_owner` (who re-sends its answer);
        False when another delivery adopted it first or it was delivered."""
        ...

    def purge_expired(self) -> int:
        """Delete records past their TTL; returns how many were removed."""
        ...

    def put_continuation(self, continuation: Continuation) -> None:
        """Create a continuation; raises StoreConflict if the id exists."""
        ...

    def get_continuation(self, continuation_id: str) -> Continuation | None:
        """The continuation, or None if unknown or deleted."""
        ...

    def update_continuation(self, continuation: Continuation, expected_version: int) -> bool:
        """Replace it only if its stored version is `expected_version`; the stored copy then
        carries version ``expected_version + 1`` (whatever `continuation.version` says)."""
        ...

    def delete_continuation(self, continuation_id: str) -> bool:
        """Remove it; False if it did not exist."""
        ...

    def due_continuations(self, now: float, limit: int = 100) -> list[Continuation]:
        """Continuations with ``next_run_at <= now``, earliest first, at most `limit`."""
        ...

    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...
