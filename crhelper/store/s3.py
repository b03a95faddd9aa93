"""OSS / S3 store: the shared store for functions on Function Compute.

URL: ``s3://bucket/prefix?endpoint=https://s3.oss-cn-hangzhou.aliyuncs.com&region=cn-hangzhou``
with optional ``addressing=virtual|path`` (default virtual, the only style real OSS accepts),
``dialect=oss|s3`` (default oss: adds ``x-oss-forbid-overwrite: true`` to every PutObject) and
``signature=s3v4|s3`` (default s3v4). Client details and credentials: see `s3_client`.

Why every write is a conditional *create*: OSS documents a create-only PutObject
(``x-oss-forbid-overwrite``; S3's equivalent is ``If-None-Match: *``) but its PutObject documents
no ``If-Match``, so an ETag compare-and-set would silently become last-writer-wins on OSS. Each
record is therefore a short log of immutable objects ``<prefix><kind>/<name>/<seq>.json``:

* the current state is the object with the highest ``seq``;
* a transition from ``seq`` n writes n+1 with create-only semantics, so of two racers one fails;
* after a successful create the writer lists the log: if a higher ``seq`` already exists it was a
  stale writer re-filling a collected slot, and it lost; otherwise it won and deletes slots < n+1;
* deletions (release, delete_continuation) write a tombstone instead of removing the log, so a
  stale writer cannot resurrect the record; `purge_expired` removes logs whose head has expired.

A create that fails with 409/412 is checked against the stored bytes (every document carries a
random write id): a retried request whose first attempt succeeded is recognised as a win.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, replace
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
    StoreError,
    check_continuation_id,
)

SEQ_DIGITS = 12
MAX_RACE_ROUNDS = 50
_RECORD, _CONTINUATION, _TOMBSTONE = "record", "continuation", "tombstone"
_CONFLICT_STATUSES = (409, 412)


@dataclass(frozen=True)
class _Head:
    """The newest object of one log: its sequence number and document (None when empty)."""

    seq: int
    doc: dict[str, Any] | None


def _status(exc: Exception) -> int:
    response = getattr(exc, "response", None) or {}
    return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code") or "")


class S3Store:
    """`Store` on an S3-compatible bucket (Alibaba Cloud OSS in production)."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        clock: Callable[[], float] = time.time,
        tombstone_ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        self._client = client
        self._bucket = bucket
        self._prefix = prefix
        self._clock = clock
        self._tombstone_ttl = tombstone_ttl_seconds
        self._client_error = ClientError
        self._io_errors: tuple[type[Exception], ...] = (ClientError, BotoCoreError)

    # -- the object log (public: the boot-group store builds on the same create-only log) --------

    def log_dir(self, kind: str, name: str) -> str:
        return f"{self._prefix}{kind}/{name}/"

    def _fail(self, action: str, exc: Exception) -> StoreError:
        code = _code(exc) or type(exc).__name__
        return StoreError(f"store s3 {action} in bucket '{self._bucket}' failed: {code}")

    def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix}
        try:
            while True:
                page = self._client.list_objects_v2(**kwargs)
                keys.extend(item["Key"] for item in page.get("Contents", []))
                if not page.get("IsTruncated"):
                    return keys
                kwargs["ContinuationToken"] = page["NextContinuationToken"]
        except self._io_errors as exc:
            raise self._fail("ListObjectsV2", exc) from None

    @staticmethod
    def _seq_of(key: str) -> int:
        name = key.rsplit("/", 1)[-1]
        stem = name[: -len(".json")] if name.endswith(".json") else ""
        return int(stem) if stem.isdigit() else -1

    def _seqs(self, log_dir: str) -> list[int]:
        return sorted(s for s in (self._seq_of(k) for k in self.list_keys(log_dir)) if s >= 0)

    def _object_key(self, log_dir: str, seq: int) -> str:
        return f"{log_dir}{seq:0{SEQ_DIGITS}d}.json"

    def get_bytes(self, key: str) -> bytes | None:
        try:
            return self._client.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        except self._client_error as exc:
            if _status(exc) == 404 or _code(exc) in ("NoSuchKey", "404"):
                return None
            raise self._fail("GetObject", exc) from None
        except self._io_errors as exc:
            raise self._fail("GetObject", exc) from None

    def head(self, log_dir: str) -> _Head:
        """Newest object; re-lists when a concurrent writer collected it between list and get."""
        for _ in range(MAX_RACE_ROUNDS):
            seqs = self._seqs(log_dir)
            if not seqs:
                return _Head(0, None)
            raw = self.get_bytes(self._object_key(log_dir, seqs[-1]))
            if raw is not None:
                try:
                    return _Head(seqs[-1], json.loads(raw))
                except ValueError:
                    raise StoreError(f"store object in '{log_dir}' is not JSON") from None
        raise StoreError(f"store log '{log_dir}' kept changing while being read")

    def create_object(self, key: str, body: bytes) -> bool:
        """Create-only PutObject; False when the key already holds someone else's bytes."""
        try:
            self._client.put_object(
                Bucket=self._bucket,
                Key=key,
                Body=body,
                ContentType="application/json",
                IfNoneMatch="*",
            )
            return True
        except self._client_error as exc:
            if _status(exc) in _CONFLICT_STATUSES:
                return self.get_bytes(key) == body
            raise self._fail("PutObject", exc) from None
        except self._io_errors as exc:
            raise self._fail("PutObject", exc) from None

    def delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            try:
                self._client.delete_objects(
                    Bucket=self._bucket,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except self._io_errors as exc:
                raise self._fail("DeleteObjects", exc) from None

    def advance_log(self, log_dir: str, seq: int, doc: dict[str, Any]) -> bool:
        """Write `doc` as entry `seq`; True only if it is now the newest entry of the log."""
        body = json.dumps({**doc, "write_id": secrets.token_hex(16)}, sort_keys=True).encode()
        if not self.create_object(self._object_key(log_dir, seq), body):
            return False
        seqs = self._seqs(log_dir)
        if seqs and seqs[-1] > seq:
            return False
        older = [self._object_key(log_dir, s) for s in seqs if s < seq]
        if older:
            self.delete_keys(older)
        return True

    # -- idempotency records -------------------------------------------------------------

    def _record_dir(self, key: IdempotencyKey) -> str:
        return self.log_dir("idem", key.digest())

    @staticmethod
    def _record_of(head: _Head) -> IdempotencyRecord | None:
        if head.doc is None or head.doc.get("kind") != _RECORD:
            return None
        return IdempotencyRecord.from_dict(head.doc)

    def _record_doc(self, record: IdempotencyRecord, seq: int) -> dict[str, Any]:
        return {"kind": _RECORD, **replace(record, version=seq).to_dict()}

    def claim(
        self,
        key: IdempotencyKey,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        response_urls: Mapping[str, str] | None = None,
    ) -> ClaimResult:
        log_dir = self._record_dir(key)
        for _ in range(MAX_RACE_ROUNDS):
            head = self.head(log_dir)
            current = self._record_of(head)
            result, to_write = transitions.decide_claim(
                current, key, owner, self._clock(), lease_seconds, ttl_seconds, response_urls
            )
            if to_write is None:
                return result
            seq = head.seq + 1
            if self.advance_log(log_dir, seq, self._record_doc(to_write, seq)):
                return ClaimResult(result.status, replace(to_write, version=seq))
        raise StoreError("store s3 claim lost too many races in a row")

    def claim_with_continuation(
        self,
        key: IdempotencyKey,
        continuation: Continuation,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
    ) -> ClaimResult:
        """Two logs cannot change in one conditional write, so the continuation is created first and
        withdrawn when the claim does not own the request: a crash after the first write leaves a
        continuation whose short lease lapses, and recovery claims and runs the request. (Claiming
        first would leave, after a crash, a claim held to the deadline with nothing to resume.)"""
        self.put_continuation(continuation)
        result = self.claim(key, continuation.id, lease_seconds, ttl_seconds)
        if not result.owns:
            self.delete_continuation(continuation.id)
        return result

    def mark_delivered_and_delete(self, key: IdempotencyKey, owner: str, continuation_id: str) -> bool:
        """The mark first: a crash before the delete leaves a continuation whose lease lapses, and
        recovery, finding the answer delivered, only removes it."""
        marked = self.mark_delivered(key, owner)
        self.delete_continuation(continuation_id)
        return marked

    def _transition(
        self,
        key: IdempotencyKey,
        step: Callable[[IdempotencyRecord | None], dict[str, Any] | None],
    ) -> bool:
        """Apply `step` to the head until it writes or declines; step returns the next doc."""
        log_dir = self._record_dir(key)
        for _ in range(MAX_RACE_ROUNDS):
            head = self.head(log_dir)
            doc = step(self._record_of(head))
            if doc is None:
                return False
            if self.advance_log(log_dir, head.seq + 1, {**doc, "version": head.seq + 1}):
                return True
        raise StoreError("store s3 update lost too many races in a row")

    def renew(self, key: IdempotencyKey, owner: str, lease_seconds: float) -> bool:
        def step(current: IdempotencyRecord | None) -> dict[str, Any] | None:
            new = transitions.renewed(current, owner, self._clock(), lease_seconds)
            return None if new is None else self._record_doc(new, new.version)

        return self._transition(key, step)

    def complete(self, key: IdempotencyKey, owner: str, response: dict[str, Any]) -> bool:
        def step(current: IdempotencyRecord | None) -> dict[str, Any] | None:
            new = transitions.completed(current, owner, self._clock(), response)
            return None if new is None else self._record_doc(new, new.version)

        return self._transition(key, step)

    def mark_delivered(self, key: IdempotencyKey, owner: str) -> bool:
        def step(current: IdempotencyRecord | None) -> dict[str, Any] | None:
            new = transitions.delivered(current, owner, self._clock())
            return None if new is None else self._record_doc(new, new.version)

        return self._transition(key, step)

    def adopt(self, key: IdempotencyKey, owner: str, new_owner: str) -> bool:
        def step(current: IdempotencyRecord | None) -> dict[str, Any] | None:
            new = transitions.adopted(current, owner, new_owner, self._clock())
            return None if new is None else self._record_doc(new, new.version)

        return self._transition(key, step)

    def release(self, key: IdempotencyKey, owner: str) -> bool:
        def step(current: IdempotencyRecord | None) -> dict[str, Any] | None:
            if current is None or not transitions.may_release(current, owner, self._clock()):
                return None
            return {"kind": _TOMBSTONE, "expires_at": current.expires_at}

        return self._transition(key, step)

    def get(self, key: IdempotencyKey) -> IdempotencyRecord | None:
        record = self._record_of(self.head(self._record_dir(key)))
        if record is None or record.is_expired(self._clock()):
            return None
        return record

    def heads_under(self, kind: str) -> dict[str, tuple[list[str], str]]:
        """name -> (all keys of its log, newest key), from one listing of `kind`."""
        logs: dict[str, list[str]] = {}
        root = f"{self._prefix}{kind}/"
        for key in self.list_keys(root):
            name, _, rest = key[len(root) :].partition("/")
            if name and self._seq_of(rest) >= 0 and "/" not in rest:
                logs.setdefault(name, []).append(key)
        return {name: (keys, max(keys)) for name, keys in logs.items()}

    def purge_expired(self) -> int:
        now = self._clock()
        removed = 0
        for kind in ("idem", "cont"):
            for keys, newest in self.heads_under(kind).values():
                raw = self.get_bytes(newest)
                if raw is None:
                    continue
                doc = json.loads(raw)
                if doc.get("kind") in (_RECORD, _TOMBSTONE) and now >= float(doc["expires_at"]):
                    self.delete_keys(keys)
                    removed += doc.get("kind") == _RECORD
        return removed

    # -- continuations -------------------------------------------------------------------

    def _cont_dir(self, continuation_id: str) -> str:
        return self.log_dir("cont", continuation_id)

    @staticmethod
    def _continuation_of(doc: Mapping[str, Any] | None) -> Continuation | None:
        if doc is None or doc.get("kind") != _CONTINUATION:
            return None
        return Continuation.from_dict(doc)

    def put_continuation(self, continuation: Continuation) -> None:
        check_continuation_id(continuation.id)
        log_dir = self._cont_dir(continuation.id)
        if self._seqs(log_dir):
            raise StoreConflict("continuation id already exists")
        seq = continuation.version
        doc = {"kind": _CONTINUATION, **continuation.to_dict()}
        if not self.advance_log(log_dir, seq, doc):
            raise StoreConflict("continuation id already exists")

    def get_continuation(self, continuation_id: str) -> Continuation | None:
        try:
            check_continuation_id(continuation_id)
        except ValueError:
            return None
        return self._continuation_of(self.head(self._cont_dir(continuation_id)).doc)

    def update_continuation(self, continuation: Continuation, expected_version: int) -> bool:
        log_dir = self._cont_dir(continuation.id)
        current = self._continuation_of(self.head(log_dir).doc)
        if current is None or current.version != expected_version:
            return False
        new = replace(continuation, version=expected_version + 1)
        return self.advance_log(log_dir, new.version, {"kind": _CONTINUATION, **new.to_dict()})

    def delete_continuation(self, continuation_id: str) -> bool:
        try:
            check_continuation_id(continuation_id)
        except ValueError:
            return False
        log_dir = self._cont_dir(continuation_id)
        for _ in range(MAX_RACE_ROUNDS):
            head = self.head(log_dir)
            if self._continuation_of(head.doc) is None:
                return False
            tombstone = {"kind": _TOMBSTONE, "expires_at": self._clock() + self._tombstone_ttl}
            if self.advance_log(log_dir, head.seq + 1, tombstone):
                return True
        raise StoreError("store s3 delete lost too many races in a row")

    def due_continuations(self, now: float, limit: int = 100) -> list[Continuation]:
        """Lists every continuation log: O(number of live continuations), meant for recovery."""
        due: list[Continuation] = []
        for _, newest in self.heads_under("cont").values():
            raw = self.get_bytes(newest)
            found = None if raw is None else self._continuation_of(json.loads(raw))
            if found is not None and found.next_run_at <= now:
                due.append(found)
        due.sort(key=lambda c: (c.next_run_at, c.id))
        return due[: max(limit, 0)]

    def close(self) -> None:
        self._client.close()
