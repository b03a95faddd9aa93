"""Idempotent and resumable handling: every request is claimed in the store before its handler runs,
and a handler that returns InProgress is continued later from a stored continuation.

The operation's id is both the idempotency record's owner and the continuation's id, so whoever
resumes the operation (another process, after a crash) owns the record and can complete it.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from .dispatch import failed_for, exception_reason
from .logs import get_logger, request_context
from .reentry import Reentry
from .registry import Registry
from .request import Request, parse_request
from .response import InProgress, fit_to_limit
from .store import ClaimStatus, Continuation, IdempotencyKey, RecordState, Store, new_continuation_id
from .store.base import FINISHED_ATTEMPT

_log = get_logger("lifecycle")

#: How often a duplicate in-band request checks whether the delivery in flight has finished.
IN_FLIGHT_POLL = 0.1
#: A re-entry arriving this early is still accepted (timers and FC's delay are not exact).
EARLY_TOLERANCE = 1.0

Step = Callable[[Request], "dict[str, Any] | InProgress"]


class Lifecycle:
    """Runs requests exactly once per (StackId, RequestId, LogicalResourceId) and continues long work."""

    def __init__(
        self,
        registry: Registry,
        store: Store,
        *,
        default_type: str | None,
        step_lease: float,
        record_ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.store = store
        self.default_type = default_type
        self.step_lease = step_lease
        self.record_ttl = record_ttl
        self.clock = clock

    # entry points ------------------------------------------------------------------------
    def process(self, request: Request, raw: dict[str, Any], run: Step, reentry: Reentry | None) -> dict[str, Any] | None:
        """The body to send for a fresh delivery, or None when nothing must be sent now."""
        key = IdempotencyKey(request.stack_id, request.request_id, request.logical_resource_id)
        operation_id = new_continuation_id()
        claim = self.store.claim(key, operation_id, lease_seconds=self.step_lease, ttl_seconds=self.record_ttl)
        if claim.status is ClaimStatus.COMPLETED:
            _log.info("duplicate of a completed request: re-sending the stored response")
            return claim.record.response
        if claim.status is ClaimStatus.IN_FLIGHT:
            owner = claim.record.owner
            continuation = self.store.get_continuation(owner)
            if continuation is not None and self._due(continuation, self.clock()):
                _log.warning("duplicate found a stalled operation: resuming it")
                resumed = self.resume(owner, run, reentry)
                return resumed[1] if resumed else None
            _log.info("duplicate while the request is in flight: not run again")
            return None
        if claim.status is ClaimStatus.TAKEN_OVER:
            _log.warning("an earlier attempt lost its lease without finishing: running the request again")
        started = self.clock()
        request = dataclasses.replace(request, started_at=started)
        return self._step(operation_id, key, request, raw, None, run, reentry)

    def process_in_band(
        self, request: Request, run: Callable[[Request], dict[str, Any]], wait_until: float | None
    ) -> dict[str, Any]:
        """For replies in the HTTP body (`web[sync]`): run once per request, and answer duplicates with
        the stored response, waiting for one still in flight until `wait_until` (time.monotonic())."""
        key = IdempotencyKey(request.stack_id, request.request_id, request.logical_resource_id)
        operation_id = new_continuation_id()
        claim = self.store.claim(key, operation_id, lease_seconds=self.step_lease, ttl_seconds=self.record_ttl)
        if claim.status is ClaimStatus.COMPLETED and claim.record.response is not None:
            _log.info("duplicate of a completed request: replying with the stored response")
            return claim.record.response
        if claim.status is ClaimStatus.IN_FLIGHT:
            while wait_until is None or time.monotonic() < wait_until:
                record = self.store.get(key)
                if record is not None and record.response is not None:
                    _log.info("duplicate answered with the response of the delivery that was in flight")
                    return record.response
                if record is None or not record.lease_live(self.clock()):
                    break
                time.sleep(IN_FLIGHT_POLL)
            return failed_for(request, "a previous delivery of this request is still running; ROS may retry it")
        outcome = run(request)
        return self._finish(operation_id, key, None, body=outcome) or outcome

    def resume(self, operation_id: str, run: Step, reentry: Reentry | None) -> tuple[Request, dict[str, Any]] | None:
        """Continue an operation; only one caller wins the continuation's compare-and-set."""
        continuation = self.store.get_continuation(operation_id)
        if continuation is None:
            _log.info("re-entry for an operation that has already finished: ignored")
            return None
        now = self.clock()
        request = dataclasses.replace(
            parse_request(continuation.request),
            state=continuation.state,
            attempt=max(continuation.attempt, 0),
            started_at=continuation.started_at,
        )
        key = IdempotencyKey(request.stack_id, request.request_id, request.logical_resource_id)
        record = self.store.get(key)
        if record is None or record.owner != operation_id:
            # Expired, or taken over by a later delivery that now runs (and answers) the request.
            _log.warning("continuation no longer owns its request: dropped without running")
            self.store.delete_continuation(operation_id)
            return None
        if record.state is RecordState.COMPLETED:
            return self._finished(continuation, request, record.response or {}, now)
        if not self._due(continuation, now):
            _log.info("re-entry before the operation is due or while a step holds it: ignored")
            return None
        held = dataclasses.replace(continuation, next_run_at=now + self.step_lease)
        if not self.store.update_continuation(held, continuation.version):
            _log.info("another process took this step: ignored")
            return None
        held = dataclasses.replace(held, version=continuation.version + 1)
        with request_context(request.log_fields()):
            if now >= continuation.deadline:
                body = self._timed_out(operation_id, key, request, held)
            else:
                body = self._step(operation_id, key, request, continuation.request, held, run, reentry)
        return (request, body) if body is not None else None

    def _finished(
        self, continuation: Continuation, request: Request, body: dict[str, Any], now: float
    ) -> tuple[Request, dict[str, Any]] | None:
        """A re-entry after completion re-sends the stored answer (its first send may have been lost);
        the marker itself is removed once it is due, i.e. when duplicates are no longer expected."""
        if continuation.finished and now >= continuation.next_run_at:
            self.store.delete_continuation(continuation.id)
            return None
        if not continuation.finished and not self._mark_finished(continuation, continuation.version):
            return None  # another process is re-sending it
        _log.info("re-entry of a completed operation: re-sending the stored response")
        return request, body

    def _mark_finished(self, continuation: Continuation, version: int) -> bool:
        marker = dataclasses.replace(continuation, attempt=FINISHED_ATTEMPT, next_run_at=self.clock() + self.record_ttl)
        return self.store.update_continuation(marker, version)

    def recover(self, run: Step, reentry: Reentry | None, limit: int = 50) -> list[tuple[Request, dict[str, Any]]]:
        """Resume operations whose process died (their step lease ran out); returns bodies to send."""
        finished = []
        for continuation in self.store.due_continuations(self.clock() - EARLY_TOLERANCE, limit):
            resumed = self.resume(continuation.id, run, reentry)
            if resumed is not None:
                finished.append(resumed)
        return finished

    # internals -----------------------------------------------------------------------------
    @staticmethod
    def _due(continuation: Continuation, now: float) -> bool:
        return continuation.next_run_at <= now + EARLY_TOLERANCE

    def _deadline_for(self, request: Request) -> float:
        try:
            resource_type = self.registry.resolve_type(request.resource_type, self.default_type)
        except LookupError:
            resource_type = request.resource_type
        return self.registry.options(resource_type).deadline

    def _step(
        self,
        operation_id: str,
        key: IdempotencyKey,
        request: Request,
        raw: dict[str, Any],
        held: Continuation | None,
        run: Step,
        reentry: Reentry | None,
    ) -> dict[str, Any] | None:
        outcome = run(request)
        if not isinstance(outcome, InProgress):
            return self._finish(operation_id, key, held, body=outcome)
        unavailable = (
            getattr(reentry, "unavailable_reason", None) if reentry is not None
            else "this delivery path cannot call it again later (use an asynchronous ServiceToken, or set CRHELPER_REENTRY)"
        )
        if reentry is None or unavailable:
            return self._finish(operation_id, key, held,
                                body=failed_for(request, f"the handler returned InProgress, but {unavailable}"))
        started = request.started_at if request.started_at is not None else self.clock()
        deadline = started + self._deadline_for(request)
        now = self.clock()
        delay = max(0.0, min(float(outcome.delay), deadline - now))
        continuation = Continuation(
            id=operation_id, request=raw, state=outcome.state, attempt=request.attempt + 1,
            started_at=started, deadline=deadline, next_run_at=now + delay,
            version=held.version if held else 1,
        )
        if held is None:
            self.store.put_continuation(continuation)
        elif not self.store.update_continuation(continuation, held.version):
            _log.warning("lost the operation to another process while running a step: dropping this result")
            return None
        # The record stays in flight for the whole operation, so a duplicate never restarts it; the
        # continuation alone decides whether a step is due or stalled.
        self.store.renew(key, operation_id, (deadline - now) + self.step_lease)
        try:
            reentry.schedule(operation_id, delay)
        except Exception as exc:  # the continuation is stored: recovery or a redelivery can still resume it
            _log.error("could not schedule the next call", extra={"fields": {"error": exception_reason(exc)}})
        _log.info("operation in progress", extra={"fields": {"attempt": continuation.attempt, "delay": delay, "via": reentry.name}})
        return None

    def _timed_out(self, operation_id: str, key: IdempotencyKey, request: Request, held: Continuation) -> dict[str, Any] | None:
        continuation = held
        seconds = continuation.deadline - continuation.started_at
        try:
            resource_type = self.registry.resolve_type(request.resource_type, self.default_type)
            hook = self.registry.options(resource_type).on_timeout
            if hook is not None:
                hook(request)
        except Exception as exc:
            _log.error("on_timeout hook failed", extra={"fields": {"error": exception_reason(exc)}})
        return self._finish(operation_id, key, held, body=failed_for(
            request,
            f"did not complete within {seconds:.0f} s (the deadline for {request.resource_type}); "
            f"{continuation.attempt} call(s) made",
        ))

    def _finish(
        self, operation_id: str, key: IdempotencyKey, held: Continuation | None, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        body = fit_to_limit(body)
        try:
            completed = self.store.complete(key, operation_id, body)
        except Exception as exc:  # the work is done: its answer matters more than the record of it
            _log.error("could not record the answer in the store; sending it anyway",
                       extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
            return body
        if not completed:
            if held is not None:
                self.store.delete_continuation(operation_id)
            _log.warning("the request was taken over by another process: its answer stands, this one is dropped")
            return None
        if held is not None:  # kept as a marker: a redelivered re-entry must find the answer again
            self._mark_finished(held, held.version)
        return body
