"""Idempotent and resumable handling: every request is claimed in the store before its handler runs,
and a handler that returns InProgress is continued later from a stored continuation.

The rules, all enforced here on top of the store's atomic primitives:

* A delivery claims the request and stores it as a continuation (attempt 0) in one store write
  (`claim_with_continuation`); the continuation is kept only when the claim owns the request. The
  continuation's id is the claim's owner, so whoever resumes it owns the record and can complete it.
  A plain request costs three writes: that claim, `complete`, and `mark_delivered_and_delete`.
* A step holds its continuation: `holder` names the process and `next_run_at` is the end of a short
  lease that the process renews while the handler runs and while its answer is sent. A holder that
  dies stops renewing; one on this machine whose process is gone is known dead at once.
* A duplicate that finds the request in flight either takes the operation over (its holder is dead,
  or its lease lapsed), or leaves a follow-up that checks again when the lease ends: a re-entry of
  the operation, or, where none can be scheduled, `retry_after` for the transport. It never vanishes.
* Recovery (scheduler, FC time trigger, worker) resumes every due continuation: abandoned first
  steps as well as long operations between polls.
* A re-entry names the step it was scheduled for (`reentry.ContinuationRef`); a duplicated one for a
  step that already ran is dropped unless the operation is overdue (then it is as good as recovery).
* The answer is recorded before it is sent, and the continuation is removed (or kept as a finished
  marker for operations that were re-entered) only after the send: a process that dies between the
  two leaves a continuation whose lease lapses, and recovery sends the recorded answer.
* A Create that fails after its handler produced a resource (bad Data, or a handler that finished
  after its timeout FAILED) records that resource; the Delete that follows, carrying the
  failed-Create marker or no id, calls the handler's delete with it (see `_orphan_key`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from . import holder, outbound
from .constants import CREATE, DELETE, IN_PROGRESS_LOG_MESSAGE, NOTHING_CREATED_IDS
from .dispatch import Orphaned
from .response import exception_reason, failed_response
from .logs import get_logger, request_context
from .reentry import ContinuationRef, Reentry, step_of
from .registry import Registry, UnknownType
from .request import Request, parse_request
from .response import InProgress, fit_to_limit
from .store import ClaimResult, ClaimStatus, Continuation, IdempotencyKey, IdempotencyRecord, RecordState, Store, new_continuation_id
from .store.base import DELIVERED_ATTEMPT, FINISHED_ATTEMPT
from .store.budget import seconds_left

if TYPE_CHECKING:
    from concurrent.futures import Future

_log = get_logger("lifecycle")

#: How often a duplicate in-band request checks whether the delivery in flight has finished.
IN_FLIGHT_POLL = 0.1
#: A re-entry arriving up to this early waits for the due time and runs the step; one arriving
#: earlier re-schedules itself (timers and FC's delay are not exact; FC re-entries are sent early).
EARLY_TOLERANCE = 1.0
#: A follow-up fires this long after the lease it waits for ends.
FOLLOW_UP_SLACK = 0.5
#: How many failed Creates of one logical resource in one stack are remembered for their Delete.
ORPHAN_SLOTS = 8
#: How often a Delete waiting for a timed-out Create's handler checks on it.
ORPHAN_POLL = 0.2

Step = Callable[[Request], "dict[str, Any] | InProgress | Orphaned"]


class Verdict:
    """What the lifecycle decided for one delivery: the body to send now (None: nothing), and the
    call to make once it was sent (`settle`), which ends the step's hold on its continuation.
    A plain class: a dataclass's generated methods cost every cold start ~0.5 ms (issue 18)."""

    __slots__ = ("body", "request", "retry_after", "on_settle")

    def __init__(self, body: dict[str, Any] | None, request: Request | None = None, retry_after: float | None = None,
                 on_settle: Callable[[bool], None] | None = None) -> None:
        self.body = body
        self.request = request
        #: Nothing was sent and no follow-up could be left: the request is in flight in a process that
        #: may be alive; a transport that can (a queue keeping its message) should try again after this.
        self.retry_after = retry_after
        self.on_settle = on_settle

    def __repr__(self) -> str:
        return f"Verdict(body={self.body!r}, request={self.request!r}, retry_after={self.retry_after!r})"

    def settle(self, delivered: bool) -> None:
        """Report whether the body reached the ResponseURL; only the first call counts."""
        callback, self.on_settle = self.on_settle, None
        if callback is not None:
            try:
                callback(delivered)
            except Exception as exc:  # the answer went out; a stale marker only costs a re-check later
                _log.error("could not record the delivery in the store", extra={"fields": {"error": exception_reason(exc)}})


def key_of(request: Request) -> IdempotencyKey:
    """One record per StackId + RequestId + LogicalResourceId, and defensively per RequestType."""
    return IdempotencyKey(request.stack_id, f"{request.request_type}:{request.request_id}", request.logical_resource_id)


def _orphan_key(request: Request, slot: int) -> IdempotencyKey:
    """Where a failed Create of this logical resource records what its handler produced."""
    return IdempotencyKey(request.stack_id, f"crhelper:orphan:{slot}", request.logical_resource_id)


class _Hold:
    """A step's hold on its continuation; the lifecycle's renewer keeps `continuation` current."""

    def __init__(self, continuation: Continuation, claim: ClaimResult | None = None) -> None:
        self.continuation = continuation
        #: The claim stored with the continuation (`accept`): `run` need not claim again.
        self.claim = claim
        self.lock = threading.Lock()
        self.lost = False
        self.released = False


class _Renewer:
    """One thread per lifecycle renews the leases of every step in progress (a thread per request
    would cost more than the rest of a warm invocation). It starts only when a step has run for a
    third of its lease, when the first renewal is due: most steps end well before, and a cold start
    then pays for no lease thread (issue 18). Until then one pending check on the shared timer
    thread (`outbound.call_at`) stands in for it."""

    def __init__(self, lifecycle: "Lifecycle", background: bool = True) -> None:
        self._lifecycle = lifecycle
        self._holds: dict[str, _Hold] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        #: The pid that has a check pending (0: none): a forked child inherits no timer thread.
        self._check_pending = 0
        self._background = background

    def holds(self) -> list[_Hold]:
        with self._wake:
            return list(self._holds.values())

    def get(self, operation_id: str) -> _Hold | None:
        with self._wake:
            return self._holds.get(operation_id)

    def add(self, hold: _Hold) -> None:
        with self._wake:
            idle = not self._holds
            self._holds[hold.continuation.id] = hold
            if not self._background:
                return
            if self._thread is None or not self._thread.is_alive():
                if self._check_pending != os.getpid():
                    # A hold's first renewal is due a third of a lease after it was taken (`_loop`);
                    # a pending check always fires no later than that for every hold added since.
                    self._check_pending = os.getpid()
                    outbound.call_at(time.monotonic() + self._lifecycle.step_lease / 3, self._check)
            elif idle:
                # Only an idle renewer waits longer than a lease: a busy one looks again within
                # lease / 6, well before a new hold's first renewal is due (at lease / 3).
                self._wake.notify()

    def _check(self) -> None:
        """On the timer thread: start renewing if a step is still running (else nothing to do)."""
        with self._wake:
            self._check_pending = 0
            if self._holds and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, name="crhelper-lease", daemon=True)
                self._thread.start()

    def remove(self, hold: _Hold) -> None:
        with self._wake:
            if self._holds.get(hold.continuation.id) is hold:
                del self._holds[hold.continuation.id]

    def _loop(self) -> None:
        while True:
            lease = self._lifecycle.step_lease
            with self._wake:
                if not self._holds:
                    self._wake.wait(lease)
                    if not self._holds:
                        self._thread = None
                        return
                holds = list(self._holds.values())
            now = self._lifecycle.clock()
            for hold in holds:
                if hold.continuation.next_run_at - now <= lease * 2 / 3:
                    self._lifecycle.renew(hold)
            with self._wake:
                self._wake.wait(max(0.05, lease / 6))


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
        identity: Callable[[], str] = holder.current,
        is_dead: Callable[[str], bool] = holder.is_dead,
        renew_in_background: bool = True,
        new_id: Callable[[], str] = new_continuation_id,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`identity`, `is_dead`, `renew_in_background=False` (leases renewed only by explicit
        `renew(hold)` calls on `holds()`) and `new_id` (operation ids) let a model check simulate
        several processes in one, deterministically; `sleep` waits on `clock`'s scale."""
        self.registry = registry
        self.store = store
        self.default_type = default_type
        self.step_lease = step_lease
        self.record_ttl = record_ttl
        self.clock = clock
        self.identity = identity
        self.is_dead = is_dead
        self.new_id = new_id
        self.sleep = sleep
        self._renewer = _Renewer(self, background=renew_in_background)
        from .store.memory import MemoryStore

        #: The store is this process's own dicts (`memory://`): its calls cannot block, so they need
        #: no guard thread of their own (`runtime._bounded`). A subclass may do anything: not it.
        self.store_in_process = type(store) is MemoryStore

    # entry points ------------------------------------------------------------------------
    def accept(self, request: Request, raw: dict[str, Any]) -> str | None:
        """Store and claim a request before acknowledging it (a server that answers later), in one
        write: held by this process, its lease renewed until `process(..., accepted=id)` runs it.
        Should the process die first, recovery finds it and runs it. Returns the operation id, or
        None when the claim does not own the request (a duplicate: `run` answers it as one)."""
        mine = self._first_step(request, raw)
        claim = self.store.claim_with_continuation(key_of(request), mine, *self._claim_terms(mine))
        if not claim.owns:
            return None
        return self._hold(mine, claim).continuation.id

    def discard(self, operation_id: str) -> None:
        """Forget a request accepted with `accept` that will not be run here (refused after all):
        its claim is released, so a redelivery runs it at once."""
        hold = self._renewer.get(operation_id)
        if hold is not None:
            self._release(hold)
            if hold.claim is not None:
                self.store.release(key_of(parse_request(hold.continuation.request)), operation_id)
        self.store.delete_continuation(operation_id)

    def _claim_terms(self, mine: Continuation) -> tuple[float, float]:
        """The lease (to the operation's deadline) and TTL of the claim of a fresh delivery."""
        left = max(0.0, mine.deadline - self.clock())
        return left + self.step_lease, max(self.record_ttl, left + self.step_lease)

    def _first_step(self, request: Request, raw: dict[str, Any]) -> Continuation:
        """The continuation of a fresh delivery, held by this process for one lease."""
        now = self.clock()
        return Continuation(
            id=self.new_id(), request=raw, state=None, attempt=0, started_at=now,
            deadline=now + self._deadline_for(request), next_run_at=now + self.step_lease, holder=self.identity(),
        )

    def run(
        self, request: Request, raw: dict[str, Any], run: Step, reentry: Reentry | None, accepted: str | None = None
    ) -> Verdict:
        """What to send for a fresh delivery (a Verdict whose body is None when nothing is due now);
        `accepted` is the id `accept` returned for this request."""
        key = key_of(request)
        hold = self._renewer.get(accepted) if accepted is not None else None
        mine = hold.continuation if hold is not None else self._first_step(request, raw)
        if hold is not None and hold.lost:
            _log.warning("an accepted request was taken over by another process before it ran: not run here")
            return Verdict(None, request)
        if hold is not None and hold.claim is not None:
            claim = hold.claim  # claimed when it was accepted
        elif hold is None:
            # The request is stored with its claim (one write): a process dying after it leaves
            # something recovery can find and run again; the continuation is kept only if it owns.
            claim = self.store.claim_with_continuation(key, mine, *self._claim_terms(mine))
            if claim.owns:
                hold = self._hold(mine)
        else:
            claim = self.store.claim(key, mine.id, *self._claim_terms(mine))
        if claim.status is ClaimStatus.COMPLETED:
            return self._completed(key, claim.record, hold, mine, request, reentry)
        if not claim.owns:
            if hold is not None:
                self.discard(mine.id)
            if claim.status is ClaimStatus.IN_FLIGHT:
                return self._in_flight(claim.record, raw, request, run, reentry)
        assert hold is not None  # owned: stored with the claim, or accepted earlier
        if claim.status is ClaimStatus.TAKEN_OVER:
            _log.warning("an earlier attempt lost its lease without finishing: running the request again")
        request = dataclasses.replace(request, started_at=mine.started_at)
        return self._step(key, request, hold, run, reentry)

    def run_in_band(
        self, request: Request, run: "Callable[[Request], dict[str, Any] | Orphaned]", wait_until: float | None
    ) -> dict[str, Any]:
        """For replies in the HTTP body (`web[sync]`): run once per request, and answer duplicates with
        the stored response, waiting for one still in flight until `wait_until` (time.monotonic())."""
        key = key_of(request)
        operation_id = self.new_id()
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
            return failed_response(request, "a previous delivery of this request is still running; ROS may retry it")
        outcome = self._unwrap_orphan(request, run(request))
        body = fit_to_limit(outcome) if isinstance(outcome, dict) else failed_response(request, "internal error: no answer")
        try:
            self.store.complete(key, operation_id, body)
        except Exception as exc:
            _log.error("could not record the answer in the store; replying anyway", extra={"fields": {"error": exception_reason(exc)}})
        return body

    def resume(self, operation_id: str, run: Step, reentry: Reentry | None) -> Verdict | None:
        """Continue an operation (a scheduled re-entry, a follow-up, recovery); only one caller wins
        the continuation's compare-and-set. None when there is nothing to do now."""
        continuation = self.store.get_continuation(operation_id)
        if continuation is None:
            _log.info("re-entry for an operation that has already finished: ignored")
            return None
        now = self.clock()
        step = step_of(operation_id)
        if step is not None and not continuation.finished and step < continuation.attempt \
                and not self._overdue(continuation, now):
            # A duplicated re-entry (FC async and MNS deliver at least once) of a step that already
            # ran: the operation's own re-entry for its current step is on its way. Re-scheduling
            # this one would cost an extra invocation on every poll until the operation ends.
            _log.info("re-entry for an earlier step of the operation: dropped",
                      extra={"fields": {"step": step, "current_step": continuation.attempt}})
            return None
        request = dataclasses.replace(
            parse_request(continuation.request),
            state=continuation.state,
            attempt=max(continuation.attempt, 0),
            started_at=continuation.started_at,
        )
        key = key_of(request)
        record = self.store.get(key)
        if continuation.finished:
            return self._finished(continuation, request, record, now)
        if record is None:
            # Its process died between storing the request and claiming it, or the record expired.
            claim = self.store.claim(key, operation_id, lease_seconds=max(1.0, continuation.deadline - now) + self.step_lease,
                                     ttl_seconds=self.record_ttl)
            if not claim.owns:
                self.store.delete_continuation(operation_id)
                return None
            record = claim.record
        elif record.owner != operation_id:
            taken = self._take_from_other(continuation, record, now, reentry)
            if taken is None:
                return None
            record = taken
        if not continuation.holder and continuation.next_run_at > now:
            early = continuation.next_run_at - now
            if early > EARLY_TOLERANCE or early > seconds_left(math.inf) / 2:
                self._reschedule(operation_id, early, reentry)
                return None
            # Arrived early on purpose (FC re-invocations are sent up to a second ahead to hide their
            # overheads): wait for the due time here rather than run the step before it.
            self._prepare(reentry)
            self.sleep(early)
            now = max(self.clock(), continuation.next_run_at)
        elif not self._takeable(continuation, now):
            self._follow_up(operation_id, continuation.next_run_at - now, reentry, continuation.attempt)
            return None
        elif continuation.attempt > 0:
            self._prepare(reentry)
        if continuation.holder:
            _log.warning("resuming an operation whose step was abandoned (its process died or its lease lapsed)")
        held = dataclasses.replace(continuation, next_run_at=now + self.step_lease, holder=self.identity())
        if not self.store.update_continuation(held, continuation.version):
            _log.info("another process took this step: ignored")
            return None
        hold = self._hold(dataclasses.replace(held, version=continuation.version + 1))
        with request_context(request.log_fields()):
            if record.state is RecordState.DELIVERED:  # its process died just after sending it
                self._settle(hold, True, key)
                return None
            if record.state is RecordState.COMPLETED:
                # Recorded by this operation, but its process died before the answer was sent.
                _log.warning("sending the recorded answer of an operation whose process died before sending it")
                return Verdict(record.response, request, on_settle=lambda delivered: self._settle(hold, delivered, key))
            if now >= continuation.deadline:
                return self._timed_out(key, request, hold)
            return self._step(key, request, hold, run, reentry)

    def recoverable(self, limit: int = 50) -> list[str]:
        """Operations to resume now: abandoned steps (lease lapsed, or a holder of this machine that
        died, taken over at once rather than when its lease ends), overdue polls and due markers."""
        now = self.clock()
        due = []
        for continuation in self.store.due_continuations(now + self.step_lease, limit):
            if continuation.finished:
                if continuation.next_run_at > now:
                    continue
            elif not self._overdue(continuation, now):
                continue
            elif self._foreign(continuation, now):
                continue
            due.append(continuation.id)
        return due

    def _overdue(self, continuation: Continuation, now: float) -> bool:
        """Left for recovery: a poll later than a re-entry can be early, or an abandoned step (its
        lease lapsed, or its holder on this machine died)."""
        return continuation.next_run_at <= now - EARLY_TOLERANCE or bool(
            continuation.holder and self._takeable(continuation, now))

    def _foreign(self, continuation: Continuation, now: float) -> bool:
        """An operation of a type this provider does not handle: another provider shares the store
        (two functions on one OSS prefix, or one home), so it is left to its own provider's recovery,
        which can run it, rather than answered FAILED "unknown ResourceType" here. Past its deadline
        any provider may answer it: FAILED for the deadline is the answer either way."""
        if continuation.deadline <= now:
            return False
        try:
            self.registry.resolve_type(str(continuation.request.get("ResourceType") or ""), self.default_type)
        except UnknownType:
            return True
        return False

    def recover(self, run: Step, reentry: Reentry | None, limit: int = 50) -> list[Verdict]:
        """Resume `recoverable` operations one after another; returns the verdicts whose bodies the
        caller sends (and settles). Servers run them side by side instead (`services.recover`)."""
        finished = []
        for operation_id in self.recoverable(limit):
            resumed = self.resume_safely(operation_id, run, reentry)
            if resumed is not None and resumed.body is not None:
                finished.append(resumed)
        return finished

    def resume_safely(self, operation_id: str, run: Step, reentry: Reentry | None) -> Verdict | None:
        """`resume` for recovery: a failure is logged and leaves the operation for a later pass."""
        try:
            return self.resume(operation_id, run, reentry)
        except Exception:
            _log.exception("recovering an operation failed")
            return None

    def answer_invalid(self, raw: dict[str, Any], body: dict[str, Any]) -> Verdict:
        """The FAILED for a request that failed validation, recorded under its identifiers when they
        can be read, so that a redelivered copy is not answered a second time."""
        try:
            key = IdempotencyKey(*(str(raw.get(name) or "") for name in ("StackId", "RequestId", "LogicalResourceId")))
            key = dataclasses.replace(key, request_id=f"invalid:{key.request_id}")
        except ValueError:
            return Verdict(body)  # no identity to record it under
        owner = self.new_id()
        try:
            claim = self.store.claim(key, owner, lease_seconds=self.step_lease, ttl_seconds=self.record_ttl)
            if claim.status is ClaimStatus.COMPLETED and claim.record.state is RecordState.DELIVERED:
                _log.info("duplicate of an invalid request whose FAILED was delivered: nothing sent again")
                return Verdict(None)
            if claim.status is ClaimStatus.IN_FLIGHT:
                return Verdict(None)  # its first copy is being answered right now
            if claim.owns:
                self.store.complete(key, owner, body)
            else:
                owner = claim.record.owner
        except Exception as exc:  # the answer matters more than its record
            _log.error("could not record the answer to an invalid request", extra={"fields": {"error": exception_reason(exc)}})
            return Verdict(body)

        def settle(delivered: bool) -> None:
            if delivered:
                self.store.mark_delivered(key, owner)

        return Verdict(body, on_settle=settle)

    def give_up(self, request: Request, reason: str) -> Verdict | None:
        """Answer FAILED for a request whose handler this process cannot let finish (the server stops,
        the handler thread was interrupted). The FAILED is recorded as the request's answer under its
        owner first, so the handler finishing later, a duplicate or recovery does not answer again. An
        operation that was already re-entered is left alone: recovery resumes it from the store.
        None when nothing must be sent (it finished, or continues from the store)."""
        key = key_of(request)
        body = failed_response(request, reason)
        record = self.store.get(key)
        if record is None:  # never claimed: nothing else will answer it, once accepted ones are let go
            for hold in self.holds():
                if hold.continuation.request.get("RequestId") == request.request_id and \
                        key_of(parse_request(hold.continuation.request)) == key:
                    self.discard(hold.continuation.id)
            return Verdict(body, request)
        if record.state.done:
            return None
        continuation = self.store.get_continuation(record.owner)
        if continuation is not None and (continuation.attempt > 0 or continuation.finished):
            return None
        if (continuation is not None and continuation.holder and continuation.holder != self.identity()
                and not self.is_dead(continuation.holder)):
            return None  # another live process runs it: that one answers
        if not self.store.complete(key, record.owner, body):
            return None  # finished or taken over meanwhile: that answer stands
        self.discard(record.owner)
        return Verdict(body, request)

    def abandoned(self, request: Request, future: "Future[Any]") -> None:
        """A Create's handler is still running after its FAILED for lack of time: whatever it
        produces is recorded, so the Delete that follows can clean it up (and waits for it)."""
        if request.request_type != CREATE:
            return
        owner = self.new_id()
        slot = self._claim_orphan(request, owner, lease=self._deadline_for(request) + self.step_lease)
        if slot is None:
            return

        def done(finished: "Future[Any]") -> None:
            physical_id = None
            try:
                outcome = finished.result()
            except BaseException:
                outcome = None
            if isinstance(outcome, Orphaned):
                physical_id = outcome.physical_id
            elif isinstance(outcome, dict) and outcome.get("Status") == "SUCCESS":
                physical_id = outcome.get("PhysicalResourceId")
            if physical_id:
                _log.warning("a Create that was answered FAILED for lack of time finished later; "
                             "its resource is recorded for the Delete that follows",
                             extra={"fields": {**request.log_fields(), "PhysicalResourceId": physical_id}})
            self._record_orphan(request, slot, owner, physical_id)

        future.add_done_callback(done)

    # the hold --------------------------------------------------------------------------------
    def _hold(self, continuation: Continuation, claim: ClaimResult | None = None) -> _Hold:
        hold = _Hold(continuation, claim)
        self._renewer.add(hold)
        return hold

    def holds(self) -> list[_Hold]:
        """The steps this lifecycle is running now (whose leases it renews)."""
        return self._renewer.holds()

    def renew(self, hold: _Hold) -> None:
        """Push the hold's lease end forward (called by the renewer)."""
        with hold.lock:
            if hold.released or hold.lost:
                return
            current = hold.continuation
            renewed = dataclasses.replace(current, next_run_at=self.clock() + self.step_lease)
            try:
                won = self.store.update_continuation(renewed, current.version)
            except Exception as exc:
                _log.warning("could not renew a step's lease", extra={"fields": {"error": exception_reason(exc)}})
                return
            if won:
                hold.continuation = dataclasses.replace(renewed, version=current.version + 1)
                if renewed.next_run_at >= current.deadline:
                    # A call running past the operation's deadline: the record's lease (set to the
                    # deadline) must not lapse under it, or a duplicate would run it a second time.
                    self._renew_record(renewed)
                return
            hold.lost = True
        self._renewer.remove(hold)
        _log.warning("a step lost its lease to another process")

    def _renew_record(self, continuation: Continuation) -> None:
        try:
            key = key_of(parse_request(continuation.request))
            self.store.renew(key, continuation.id, 2 * self.step_lease)
        except Exception as exc:
            _log.warning("could not renew a request's lease", extra={"fields": {"error": exception_reason(exc)}})

    def _release(self, hold: _Hold) -> Continuation:
        """Stop renewing; returns the continuation as last written."""
        with hold.lock:
            hold.released = True
            current = hold.continuation
        self._renewer.remove(hold)
        return current

    def _settle(self, hold: _Hold, delivered: bool, key: IdempotencyKey) -> None:
        """After the answer was sent: the record says whether it arrived (so duplicates know whether
        to send it again); a request answered in its first call leaves nothing behind, and an
        operation that was re-entered keeps a finished marker for re-entries redelivered later."""
        current = self._release(hold)
        if hold.lost:
            return
        if current.attempt <= 0 and not current.finished:
            if delivered:
                self.store.mark_delivered_and_delete(key, current.id, current.id)
            else:
                self.store.delete_continuation(current.id)
            return
        if delivered:
            self.store.mark_delivered(key, current.id)
        marker = dataclasses.replace(
            current, attempt=DELIVERED_ATTEMPT if delivered else FINISHED_ATTEMPT,
            next_run_at=self.clock() + self.record_ttl, holder="",
        )
        self.store.update_continuation(marker, current.version)

    # internals -----------------------------------------------------------------------------
    def _takeable(self, continuation: Continuation, now: float) -> bool:
        """May this process run the continuation's next step now?"""
        if continuation.holder:
            return continuation.next_run_at <= now or self.is_dead(continuation.holder)
        return continuation.next_run_at <= now + EARLY_TOLERANCE

    def _reschedule(self, operation_id: str, early: float, reentry: Reentry | None) -> None:
        """A re-entry too early to wait for (a platform that does not honour the delay): call again
        when the operation is due; the store is unchanged, so a failure leaves it to recovery."""
        if reentry is None or reentry.unavailable_reason:
            _log.info("re-entry before the operation is due: ignored")
            return
        try:
            getattr(reentry, "schedule_step", reentry.schedule)(operation_id, early)
        except Exception as exc:
            _log.warning("could not re-schedule an early re-entry", extra={"fields": {"error": exception_reason(exc)}})
            return
        _log.info("re-entry before the operation is due: re-scheduled", extra={"fields": {"in": round(early, 2)}})

    @staticmethod
    def _prepare(reentry: Reentry | None) -> None:
        """Let the re-entry path get ready (import its SDK) while this step waits or runs: a step
        that is not the first is likely to schedule another one."""
        prepare = getattr(reentry, "prepare", None)
        if prepare is not None:
            threading.Thread(target=prepare, name="crhelper-reentry-prepare", daemon=True).start()

    def _follow_up(self, operation_id: str, wait: float, reentry: Reentry | None, step: int | None) -> bool:
        """Schedule a check of the operation when its holder's lease ends; False if impossible.
        `step` is the step being waited for: once it has run, the check is dropped on arrival."""
        if reentry is None or reentry.unavailable_reason:
            return False
        try:
            reentry.schedule(ContinuationRef(operation_id, step), max(0.0, wait) + FOLLOW_UP_SLACK)
        except Exception as exc:
            _log.warning("could not schedule a follow-up", extra={"fields": {"error": exception_reason(exc)}})
            return False
        return True

    def _in_flight(
        self, record: IdempotencyRecord, raw: dict[str, Any], request: Request, run: Step, reentry: Reentry | None
    ) -> Verdict:
        """A duplicate of a request that another operation holds."""
        now = self.clock()
        other = self.store.get_continuation(record.owner)
        if other is None or other.finished:
            # A record in flight with no continuation (written by an earlier version of crhelper):
            # leave our own, due when the record's lease ends.
            wait = max(0.0, record.lease_expires_at - now)
            follow = Continuation(
                id=self.new_id(), request=raw, state=None, attempt=0, started_at=now,
                deadline=now + wait + self._deadline_for(request), next_run_at=now + wait,
            )
            self.store.put_continuation(follow)
            if self._follow_up(follow.id, wait, reentry, follow.attempt):
                return Verdict(None, request)
            return Verdict(None, request, retry_after=wait + FOLLOW_UP_SLACK)
        if self._takeable(other, now):
            _log.warning("duplicate found its operation abandoned or due: resuming it")
            return self.resume(other.id, run, reentry) or Verdict(None, request)
        wait = max(0.0, other.next_run_at - now)
        if self._follow_up(other.id, wait, reentry, other.attempt):
            _log.info("duplicate while the request is in flight: not run again; a follow-up checks on it",
                      extra={"fields": {"in": round(wait + FOLLOW_UP_SLACK, 2)}})
            return Verdict(None, request)
        _log.info("duplicate while the request is in flight: not run again; retry later",
                  extra={"fields": {"retry_after": round(wait + FOLLOW_UP_SLACK, 2)}})
        return Verdict(None, request, retry_after=wait + FOLLOW_UP_SLACK)

    def _take_from_other(
        self, continuation: Continuation, record: IdempotencyRecord, now: float, reentry: Reentry | None
    ) -> IdempotencyRecord | None:
        """The record belongs to another operation: drop this continuation, wait, or take the request
        over (returning the record now owned by this continuation)."""
        if record.state is RecordState.IN_PROGRESS and self.store.get_continuation(record.owner) is None:
            if record.lease_live(now):
                self._follow_up(continuation.id, record.lease_expires_at - now, reentry, continuation.attempt)
                return None
            # An owner that left nothing to resume and whose lease lapsed: run the request here.
            claim = self.store.claim(key_of(parse_request(continuation.request)), continuation.id,
                                     lease_seconds=max(1.0, continuation.deadline - now) + self.step_lease,
                                     ttl_seconds=self.record_ttl)
            if claim.owns:
                return claim.record
        # Taken over by a later delivery, or answered by another operation: that one answers.
        _log.warning("continuation no longer owns its request: dropped without running")
        self.store.delete_continuation(continuation.id)
        return None

    def _finished(
        self, continuation: Continuation, request: Request, record: IdempotencyRecord | None, now: float
    ) -> Verdict | None:
        """A re-entry after completion re-sends the stored answer only when it did not arrive (and no
        one else is re-sending it); the marker itself is removed once it is due, i.e. when duplicates
        are no longer expected."""
        if continuation.holder and not self._takeable(continuation, now):
            return None  # another process is re-sending it right now
        if not continuation.holder and now >= continuation.next_run_at:
            self.store.delete_continuation(continuation.id)
            return None
        if record is None or record.state is not RecordState.COMPLETED or record.owner != continuation.id:
            return None
        held = dataclasses.replace(continuation, holder=self.identity(), next_run_at=now + self.step_lease)
        if not self.store.update_continuation(held, continuation.version):
            return None  # another process is re-sending it
        hold = self._hold(dataclasses.replace(held, version=continuation.version + 1))
        key = record.key

        def settle(delivered: bool) -> None:
            current = self._release(hold)
            if delivered:
                self.store.mark_delivered(key, record.owner)
            if not hold.lost:
                self.store.update_continuation(dataclasses.replace(
                    current, holder="", next_run_at=self.clock() + self.record_ttl,
                    attempt=DELIVERED_ATTEMPT if delivered else FINISHED_ATTEMPT,
                ), current.version)

        _log.info("re-entry of a completed operation whose answer did not arrive: re-sending the stored response")
        return Verdict(record.response, request, on_settle=settle)

    def _completed(
        self, key: IdempotencyKey, record: IdempotencyRecord, hold: _Hold | None, mine: Continuation,
        request: Request, reentry: Reentry | None,
    ) -> Verdict:
        """A duplicate of a request that has its answer: nothing when the answer arrived or is being
        sent right now (a follow-up checks on that send); else this delivery adopts the sending (one
        duplicate wins) and sends the stored answer again. `hold` is None when `mine` is not stored
        (a claim that did not own): it is stored only to adopt, so recovery can finish the re-send."""
        now = self.clock()
        if record.state is RecordState.DELIVERED:
            if hold is not None:
                self.discard(mine.id)
            _log.info("duplicate of a request whose answer was delivered: nothing sent again")
            return Verdict(None, request)
        sender = self.store.get_continuation(record.owner)
        if sender is None or not sender.holder or self._takeable(sender, now):
            if hold is None:
                # A fresh id: a store whose claim stored `mine` and withdrew it (S3/OSS logs keep a
                # withdrawn id taken) must not be asked to create that id again.
                mine = dataclasses.replace(mine, id=self.new_id())
                self.store.put_continuation(mine)
                hold = self._hold(mine)
            if self.store.adopt(key, record.owner, mine.id):
                if sender is not None and not sender.finished:
                    self.store.delete_continuation(sender.id)
                _log.info("duplicate of a completed request whose answer was not delivered: re-sending it")
                adopted = hold
                return Verdict(record.response, request,
                               on_settle=lambda delivered: self._settle(adopted, delivered, key))
            sender = self.store.get_continuation((self.store.get(key) or record).owner)
        if hold is not None:
            self.discard(mine.id)
        if sender is None:
            return Verdict(None, request)
        # Its holder is sending it right now: whether it arrives is not known yet.
        wait = max(0.0, sender.next_run_at - now)
        if self._follow_up(sender.id, wait, reentry, None if sender.finished else sender.attempt):
            return Verdict(None, request)
        return Verdict(None, request, retry_after=wait + FOLLOW_UP_SLACK)

    def _deadline_for(self, request: Request) -> float:
        try:
            resource_type = self.registry.resolve_type(request.resource_type, self.default_type)
        except LookupError:
            resource_type = request.resource_type
        return self.registry.options(resource_type).deadline

    def _step(self, key: IdempotencyKey, request: Request, hold: _Hold, run: Step, reentry: Reentry | None) -> Verdict:
        try:
            outcome = run(request)
        except BaseException as exc:  # a bug of ours: the request is still answered, once
            _log.exception("internal error while running a step")
            outcome = failed_response(request, f"internal error in crhelper: {exception_reason(exc)}")
        outcome = self._unwrap_orphan(request, outcome)
        if request.request_type == DELETE and isinstance(outcome, dict):
            outcome = {**outcome, "PhysicalResourceId": request.physical_resource_id or outcome.get("PhysicalResourceId")}
        if not isinstance(outcome, InProgress):
            return self._finish(key, request, hold, outcome)
        unavailable = (
            reentry.unavailable_reason if reentry is not None
            else "this delivery path cannot call it again later (use an asynchronous ServiceToken, or set CRHELPER_REENTRY)"
        )
        if reentry is None or unavailable:
            return self._finish(key, request, hold,
                                failed_response(request, f"the handler returned InProgress, but {unavailable}"))
        if request.attempt <= 0:
            self._prepare(reentry)  # beside the store writes below (a first step was not prepared for)
        current = self._release(hold)
        if hold.lost:
            _log.warning("lost the operation to another process while running a step: dropping this result")
            return Verdict(None, request)
        started = request.started_at if request.started_at is not None else current.started_at
        deadline = current.deadline
        now = self.clock()
        delay = max(0.0, min(float(outcome.delay), deadline - now))
        continuation = dataclasses.replace(
            current, state=outcome.state, attempt=request.attempt + 1, started_at=started,
            next_run_at=now + delay, holder="",
        )
        if not self.store.update_continuation(continuation, current.version):
            _log.warning("lost the operation to another process while running a step: dropping this result")
            return Verdict(None, request)
        # The record stays in flight for the whole operation, so a duplicate never restarts it; the
        # continuation alone decides whether a step is due or stalled.
        self.store.renew(key, current.id, max(0.0, deadline - now) + self.step_lease)
        try:
            getattr(reentry, "schedule_step", reentry.schedule)(ContinuationRef(current.id, continuation.attempt), delay)
        except Exception as exc:  # the continuation is stored: recovery or a redelivery can still resume it
            _log.error("could not schedule the next call", extra={"fields": {"error": exception_reason(exc)}})
        _log.info(IN_PROGRESS_LOG_MESSAGE, extra={"fields": {"attempt": continuation.attempt, "delay": delay, "via": reentry.name}})
        return Verdict(None, request)

    def _timed_out(self, key: IdempotencyKey, request: Request, hold: _Hold) -> Verdict:
        continuation = hold.continuation
        seconds = continuation.deadline - continuation.started_at
        try:
            resource_type = self.registry.resolve_type(request.resource_type, self.default_type)
            hook = self.registry.options(resource_type).on_timeout
            if hook is not None:
                hook(request)
        except Exception as exc:
            _log.error("on_timeout hook failed", extra={"fields": {"error": exception_reason(exc)}})
        return self._finish(key, request, hold, failed_response(
            request,
            f"did not complete within {seconds:.0f} s (the deadline for {request.resource_type}); "
            f"{continuation.attempt} call(s) made",
        ))

    def _finish(self, key: IdempotencyKey, request: Request, hold: _Hold, body: dict[str, Any]) -> Verdict:
        body = fit_to_limit(body)
        operation_id = hold.continuation.id
        try:
            completed = self.store.complete(key, operation_id, body)
        except Exception as exc:  # the work is done: its answer matters more than the record of it
            _log.error("could not record the answer in the store; sending it anyway",
                       extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
            return Verdict(body, request, on_settle=lambda delivered: self._settle(hold, delivered, key))
        if not completed:
            self._release(hold)
            self.store.delete_continuation(operation_id)
            _log.warning("the request was taken over by another process: its answer stands, this one is dropped")
            return Verdict(None, request)
        return Verdict(body, request, on_settle=lambda delivered: self._settle(hold, delivered, key))

    # failed Creates that left something behind ------------------------------------------------
    def _unwrap_orphan(self, request: Request, outcome: Any) -> Any:
        """A FAILED Create whose handler produced a resource: record it for the Delete that follows."""
        if not isinstance(outcome, Orphaned):
            return outcome
        slot = self._claim_orphan(request, self.new_id(), lease=self.step_lease)
        if slot is not None:
            self._record_orphan(request, slot, None, outcome.physical_id)
        return outcome.body

    def _claim_orphan(self, request: Request, owner: str, lease: float) -> int | None:
        for slot in range(1, ORPHAN_SLOTS + 1):
            try:
                claim = self.store.claim(_orphan_key(request, slot), owner, lease_seconds=lease, ttl_seconds=self.record_ttl)
            except Exception as exc:
                _log.error("could not record a failed Create's resource", extra={"fields": {"error": exception_reason(exc)}})
                return None
            if claim.owns:
                return slot
        _log.error("too many failed Creates of this resource to track another one")
        return None

    def _record_orphan(self, request: Request, slot: int, owner: str | None, physical_id: str | None) -> None:
        key = _orphan_key(request, slot)
        try:
            record = self.store.get(key)
            if record is not None:
                self.store.complete(key, owner or record.owner, {"PhysicalResourceId": physical_id})
        except Exception as exc:
            _log.error("could not record a failed Create's resource", extra={"fields": {"error": exception_reason(exc)}})

    def prepare(self, request: Request, until: float | None) -> "Request | dict[str, Any]":
        """Run by the guarded runner before the handler. A Delete of a resource whose Create failed is
        pointed at what that Create left behind, if anything, waiting for a timed-out Create's handler
        still running until `until` (time.monotonic()); FAILED if it is still running then."""
        if request.request_type != DELETE or (request.physical_resource_id or "") not in NOTHING_CREATED_IDS:
            return request
        latest: IdempotencyRecord | None = None
        for slot in range(1, ORPHAN_SLOTS + 1):
            record = self.store.get(_orphan_key(request, slot))
            if record is None:
                break
            latest = record
        if latest is None:
            return request
        key = latest.key
        while latest is not None and latest.state is RecordState.IN_PROGRESS and latest.lease_live(self.clock()):
            if until is not None and time.monotonic() + ORPHAN_POLL >= until:
                return failed_response(request, "the Create of this resource timed out and its handler is still running; "
                                           "retry the delete once it has finished")
            time.sleep(ORPHAN_POLL)
            latest = self.store.get(key)
        physical_id = (latest.response or {}).get("PhysicalResourceId") if latest is not None else None
        if not isinstance(physical_id, str) or not physical_id or physical_id in NOTHING_CREATED_IDS:
            return request
        _log.info("Delete after a failed Create: deleting the resource its handler produced",
                  extra={"fields": {"PhysicalResourceId": physical_id}})
        return dataclasses.replace(request, physical_resource_id=physical_id)
