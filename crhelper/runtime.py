"""One request, one response: decode, dispatch under the deadline guard, deliver exactly once."""

from __future__ import annotations

import collections
import contextvars
import functools
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

from . import outbound
from .config import ReadOnly, Settings
from .dispatch import Orphaned, dispatch, plain
from .response import failed_response
from .reentry import continuation_id_of
from .errors import RequestError
from .logs import get_logger, request_context
from .registry import Registry
from .request import Request, decode_event, parse_request, response_urls_of
from .response import InProgress, encode, failed_body_from_raw
from .store.base import StoreError
from .store.budget import store_deadline

if TYPE_CHECKING:
    from concurrent.futures import Future

    from .lifecycle import Lifecycle, Verdict
    from .reentry import Reentry

_log = get_logger("runtime")


class Outcome(ReadOnly):
    """What happened to one event: the body sent (None when nothing was due or possible) and its delivery."""

    __slots__ = ("body", "delivered", "error", "final", "retry_after")
    body: dict[str, Any] | None
    delivered: bool
    error: str | None
    #: The delivery failed for good (a final 4xx, an invalid URL): retrying cannot help.
    final: bool
    #: Nothing was sent because another process holds the request and may be alive, and no
    #: follow-up could be left: a transport that can (a queue) should offer it again after this many s.
    retry_after: float | None

    def __init__(self, body: dict[str, Any] | None, delivered: bool, error: str | None = None, final: bool = False,
                 retry_after: float | None = None) -> None:
        self._init(body=body, delivered=delivered, error=error, final=final, retry_after=retry_after)

    @classmethod
    def of(cls, reply: "Answer", report: "outbound.DeliveryReport") -> "Outcome":
        """The outcome of sending `reply` (or of not sending it, when it has no body)."""
        return cls(
            reply.body, report.delivered, report.error if reply.body is not None else reply.error,
            final=report.final, retry_after=reply.retry_after,
        )


class Answer(ReadOnly):
    """The response body for one event and where it goes; body is None when no answer is possible."""

    __slots__ = ("body", "request", "public_url", "intranet_url", "error", "retry_after", "verdict")
    _hidden = ("verdict",)
    body: dict[str, Any] | None
    request: Request | None
    public_url: str | None
    intranet_url: str | None
    error: str | None
    #: Nothing sent: the request is in flight elsewhere and no follow-up could be left (seconds).
    retry_after: float | None
    #: Told whether the body was delivered, so the store can let go of the operation.
    verdict: "Verdict | None"

    def __init__(self, body: dict[str, Any] | None, request: Request | None = None, public_url: str | None = None,
                 intranet_url: str | None = None, error: str | None = None, retry_after: float | None = None,
                 verdict: "Verdict | None" = None) -> None:
        self._init(body=body, request=request, public_url=public_url, intranet_url=intranet_url, error=error,
                   retry_after=retry_after, verdict=verdict)

    def with_body(self, body: dict[str, Any] | None, verdict: "Verdict | None") -> "Answer":
        """This answer with another body and verdict (what `dataclasses.replace` did)."""
        return Answer(body, self.request, self.public_url, self.intranet_url, self.error, self.retry_after, verdict)

    @classmethod
    def of(cls, verdict: "Verdict") -> "Answer":
        request = verdict.request
        return cls(
            verdict.body, request,
            request.response_url if request else None, request.intranet_response_url if request else None,
            retry_after=verdict.retry_after, verdict=verdict,
        )

    def settle(self, delivered: bool) -> None:
        if self.verdict is not None:
            self.verdict.settle(delivered)


def function_timeout(context: object | None) -> float | None:
    """The Function Compute function timeout in seconds, from an FC context (object or dict form);
    the remaining time where only that is known."""
    if context is None:
        return None
    function = getattr(context, "function", None)
    if function is None and isinstance(context, Mapping):
        function = context.get("function")
    timeout = getattr(function, "timeout", None)
    if timeout is None and isinstance(function, Mapping):
        timeout = function.get("timeout")
    try:
        if timeout is not None and float(timeout) > 0:
            return float(timeout)
    except (TypeError, ValueError):
        pass
    remaining = _remaining_seconds(context)
    return remaining


def _remaining_seconds(context: object | None) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    try:
        return max(0.0, float(remaining()) / 1000.0)
    except (TypeError, ValueError):
        return None


def invocation_deadline(context: object | None, started: float) -> float | None:
    """When this invocation must have answered (time.monotonic()): the earliest of every clock the
    context offers, counted from `started` (taken before the provider was even imported)."""
    candidates = []
    timeout = function_timeout(context)
    if timeout:
        candidates.append(started + timeout)
    remaining = _remaining_seconds(context)
    if remaining is not None:
        candidates.append(time.monotonic() + remaining)
    return min(candidates) if candidates else None


def guard_margin(timeout: float, configured: float | None) -> float:
    """How long before the deadline we stop waiting: enough to deliver FAILED, never most of the budget."""
    if configured is not None:
        return min(configured, timeout * 0.5)
    return min(5.0, max(0.5, timeout * 0.1))


class _ElasticPool:
    """Threads that run handlers under a deadline, reused across warm invocations (a new thread per
    request costs more than the rest of the framework). A handler that hangs keeps its thread and
    the pool grows past it, so hung handlers never delay another request's deadline answer."""

    IDLE_SECONDS = 60.0

    def __init__(self) -> None:
        # A deque under the pool's own lock rather than `queue.SimpleQueue`: `queue` (with `heapq`
        # and `_queue`) is ~3.5 ms of every cold start, for a hand-off this lock already guards.
        self._tasks: "collections.deque[tuple[Any, Callable[[], Any]]]" = collections.deque()
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._idle = 0
        self._threads = 0

    def submit(self, work: Callable[[], Any]) -> "Future[Any]":
        from concurrent.futures import Future

        future: Future[Any] = Future()
        with self._lock:
            spawn = self._idle == 0
            if spawn:
                self._threads += 1
            else:
                self._idle -= 1
            self._tasks.append((future, work))
            self._ready.notify()
        if spawn:
            threading.Thread(target=self._loop, name="crhelper-handler", daemon=True).start()
        return future

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._tasks:
                    self._ready.wait(self.IDLE_SECONDS)
                if not self._tasks:
                    if self._idle > 0:  # nobody counts on this thread: leave
                        self._idle -= 1
                        self._threads -= 1
                        return
                    continue
                future, work = self._tasks.popleft()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as exc:  # noqa: BLE001 - reported to the waiting caller
                    future.set_exception(exc)
            with self._lock:
                self._idle += 1

    @property
    def size(self) -> int:
        return self._threads


@functools.lru_cache(maxsize=1)
def _handler_threads() -> _ElasticPool:
    return _ElasticPool()


class _Ticket:
    """Lets a handler thread that starts late (after its request was answered FAILED) not start."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = "waiting"  # -> running | abandoned

    def start(self) -> bool:
        with self._lock:
            if self._state == "waiting":
                self._state = "running"
                return True
            return False

    def abandon(self) -> bool:
        """True when the work had already started (and goes on in the background)."""
        with self._lock:
            started = self._state == "running"
            self._state = "abandoned" if not started else "running-abandoned"
            return started


_NOT_STARTED = object()


def _run_with_deadline(work: Callable[[], Any], wait_seconds: float) -> tuple[Any, "Future[Any] | None"]:
    """Run `work` in a handler thread: (its result, None), or (None, its future) if it is still running
    after `wait_seconds` (its result is dropped), or (None, None) if it never started."""
    from concurrent.futures import TimeoutError as FutureTimeout

    if wait_seconds <= 0:
        return None, None  # no time left: a request answered FAILED for lack of time must not start
    ticket = _Ticket()
    context = contextvars.copy_context()

    def ticketed() -> Any:
        return context.run(work) if ticket.start() else _NOT_STARTED

    future = _handler_threads().submit(ticketed)
    try:
        result = future.result(timeout=wait_seconds)
    except FutureTimeout:
        return None, (future if ticket.abandon() else None)
    return (None, None) if result is _NOT_STARTED else (result, None)


def guarded_runner(
    registry: Registry,
    settings: Settings,
    deadline: float | None,
    margin: float,
    *,
    prepare: "Callable[[Request, float | None], Request | dict[str, Any]] | None" = None,
    on_abandoned: "Callable[[Request, Future[Any]], None] | None" = None,
) -> Callable[[Request], "dict[str, Any] | InProgress | Orphaned"]:
    """A function that runs one handler call, answering FAILED "timed out" if it runs into `deadline - margin`.

    `prepare` runs first inside the same guard (it may replace the request, or answer it); a handler
    still running when the guard answers is handed to `on_abandoned` with its future."""

    def run(request: Request) -> "dict[str, Any] | InProgress | Orphaned":
        until = deadline - margin if deadline is not None else None

        def work() -> "dict[str, Any] | InProgress | Orphaned":
            target = prepare(request, until) if prepare is not None else request
            if isinstance(target, dict):
                return target
            return dispatch(registry, target, settings.default_type)

        with request_context(request.log_fields()):
            if until is None:
                return work()
            outcome, still_running = _run_with_deadline(work, until - time.monotonic())
            if outcome is not None:
                return outcome
            if still_running is None:
                _log.error("no time left to run the handler before the function deadline; answering FAILED")
                return failed_response(
                    request,
                    "not started: too little time was left before the Function Compute timeout; "
                    "raise the function timeout or send fewer requests per invocation",
                )
            _log.error("handler still running near the function deadline; answering FAILED")
            if on_abandoned is not None:
                try:
                    on_abandoned(request, still_running)
                except Exception:
                    _log.exception("could not track the abandoned handler")
            return failed_response(
                request,
                "timed out: the handler was still running shortly before the Function Compute timeout; "
                "raise the function timeout or return InProgress to continue long work in a later invocation",
            )

    return run


def _parse(raw: Mapping[str, Any]) -> "Request | Answer":
    """The request, or the answer to an invalid one: FAILED naming the problem when a URL is known."""
    try:
        return parse_request(raw)
    except RequestError as exc:
        public, intranet = response_urls_of(raw)
        if public is None and intranet is None:
            return Answer(None, error=str(exc))
        return Answer(failed_body_from_raw(raw, f"invalid request: {exc}"), None, public, intranet)


def answer_in_band(
    registry: Registry,
    event: Any,
    settings: Settings,
    *,
    deadline: float | None = None,
    margin: float = 0.0,
    lifecycle: "Lifecycle | None" = None,
) -> Answer:
    """Compute the response for one event without sending it (in-band replies); with a lifecycle,
    duplicates get the stored response instead of running the handler again."""
    try:
        raw = decode_event(event)
    except RequestError as exc:
        return Answer(None, error=str(exc))
    parsed = _parse(raw)
    if isinstance(parsed, Answer):
        return parsed
    request = parsed
    public, intranet = request.response_url, request.intranet_response_url
    guarded = guarded_runner(
        registry, settings, deadline, margin,
        prepare=lifecycle.prepare if lifecycle is not None else None,
        on_abandoned=lifecycle.abandoned if lifecycle is not None else None,
    )

    def run(request: Request) -> "dict[str, Any] | Orphaned":
        """An in-band reply cannot be continued later: InProgress becomes a FAILED that says so."""
        outcome = guarded(request)
        if isinstance(outcome, InProgress):
            return failed_response(request, "the handler returned InProgress but this delivery path replies in-band "
                                       "and cannot call it again later; use an asynchronous ServiceToken")
        return outcome

    if lifecycle is not None:
        with request_context(request.log_fields()):
            body = lifecycle.run_in_band(request, run, deadline - margin if deadline is not None else None)
        return Answer(body, request, public, intranet)
    outcome = plain(run(request))
    return Answer(outcome if isinstance(outcome, dict) else None, request, public, intranet)


def send(reply: Answer, settings: Settings, deadline: float | None = None) -> outbound.DeliveryReport:
    """Deliver an answer's body once (with bounded retries inside)."""
    if reply.body is None:
        return outbound.DeliveryReport(False, 0, error=reply.error)
    fields = reply.request.log_fields() if reply.request else {}
    with request_context(fields):
        return outbound.deliver(
            encode(reply.body),
            reply.public_url,
            reply.intranet_url,
            settings.delivery,
            on_function_compute=settings.on_function_compute,
            deadline=deadline,
        )


class Services(ReadOnly):
    """What long-running and idempotent handling needs; None parts turn that feature off."""

    __slots__ = ("lifecycle", "reentry")
    lifecycle: "Lifecycle | None"
    reentry: "Reentry | None"

    def __init__(self, lifecycle: "Lifecycle | None" = None, reentry: "Reentry | None" = None) -> None:
        self._init(lifecycle=lifecycle, reentry=reentry)


def handle_event(
    registry: Registry,
    event: Any,
    settings: Settings,
    context: object | None = None,
    services: Services | None = None,
    started: float | None = None,
    accepted: str | None = None,
) -> tuple[Answer, outbound.DeliveryReport]:
    """The whole protocol for one event. Any failure of our own still ends in a FAILED when a URL is known.
    `accepted`: the operation id under which the request was stored when it was acknowledged."""
    started = time.monotonic() if started is None else started
    deadline = invocation_deadline(context, started)
    margin = guard_margin(max(0.0, deadline - started), settings.timeout_margin) if deadline is not None else 0.0
    services = services or Services()
    lifecycle = services.lifecycle
    run = guarded_runner(
        registry, settings, deadline, margin,
        prepare=lifecycle.prepare if lifecycle is not None else None,
        on_abandoned=lifecycle.abandoned if lifecycle is not None else None,
    )
    try:
        if lifecycle is None:
            result = _run_request(registry, event, settings, services, run)
        else:
            result = _bounded(lambda: _run_request(registry, event, settings, services, run, accepted), deadline, margin,
                              in_thread=not lifecycle.store_in_process)
    except BaseException as exc:  # a bug of ours, an unreachable store, a signal: still one answer
        if isinstance(exc, _OutOfTime):
            _log.error("no time left to handle the request", extra={"fields": {"error": str(exc)}})
            result = failed_answer(event, str(exc))
        elif isinstance(exc, StoreError):
            _log.error("state store unavailable", extra={"fields": {"error": str(exc)}})
            result = failed_answer(event, f"state store unavailable: {exc}")
        else:
            _log.exception("internal error while handling a request")
            result = failed_answer(event, f"internal error in crhelper: {type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            report = send(result, settings, deadline=(deadline - 0.2) if deadline else None)
            raise
    if result.body is None:
        if result.error:
            _log.error("request cannot be answered", extra={"fields": {"error": result.error}})
        return result, outbound.DeliveryReport(False, 0, error=result.error)
    report = outbound.DeliveryReport(False, 0, error="not sent")
    try:
        report = send(result, settings, deadline=(deadline - 0.2) if deadline else None)
    finally:
        result.settle(report.delivered)
    return result, report


def _bounded(process: Callable[[], Answer], deadline: float | None, margin: float, in_thread: bool = True) -> Answer:
    """Run the store calls and the handler of one event so that a store that cannot answer in time
    (a locked file, an unreachable bucket) still leaves time to send FAILED. A store that cannot
    block (this process's own dicts: `in_thread=False`) is called here, sparing a cold start the
    second handler thread (the handler still runs in one, under its own guard)."""
    if deadline is None:
        return process()
    until = deadline - margin / 2
    if not in_thread:
        if until <= time.monotonic():
            raise _OutOfTime("not started: too little time was left before the Function Compute timeout; "
                             "raise the function timeout or send fewer requests per invocation")
        with store_deadline(deadline - margin):
            return process()
    with store_deadline(deadline - margin):
        result, still_running = _run_with_deadline(process, until - time.monotonic())
    if isinstance(result, Answer):
        return result
    if still_running is not None:
        # It may still record an answer; this invocation answers FAILED instead, so let go of it then.
        still_running.add_done_callback(
            lambda done: done.result().settle(True) if not done.exception() and isinstance(done.result(), Answer) else None
        )
    if still_running is None:
        raise _OutOfTime("not started: too little time was left before the Function Compute timeout; "
                         "raise the function timeout or send fewer requests per invocation")
    raise StoreError("no answer from the store in time")


class _OutOfTime(Exception):
    """The invocation reached its deadline before the request could start."""


def _run_request(
    registry: Registry, event: Any, settings: Settings, services: Services, run: Callable[[Request], Any],
    accepted: str | None = None,
) -> Answer:
    try:
        raw = decode_event(event)
    except RequestError as exc:
        return Answer(None, error=str(exc))
    continuation_id = continuation_id_of(raw)
    if continuation_id is not None:
        if services.lifecycle is None:
            return Answer(None, error="re-entry of a long-running operation, but no store is configured (CRHELPER_STORE)")
        resumed = services.lifecycle.resume(continuation_id, run, services.reentry)
        return Answer(None) if resumed is None else Answer.of(resumed)
    parsed = _parse(raw)
    if isinstance(parsed, Answer):
        if services.lifecycle is not None and parsed.body is not None:
            # Duplicates of an invalid request are answered once too.
            verdict = services.lifecycle.answer_invalid(raw, parsed.body)
            return parsed.with_body(verdict.body, verdict)
        return parsed
    request = parsed
    public, intranet = request.response_url, request.intranet_response_url
    if services.lifecycle is None:
        outcome = plain(run(request))
        if isinstance(outcome, InProgress):
            outcome = failed_response(request, "the handler returned InProgress but long-running operations need a store; "
                                          "unset CRHELPER_STORE (it is none) or set it to a store URL")
        return Answer(outcome, request, public, intranet)
    with request_context(request.log_fields()):
        verdict = services.lifecycle.run(request, raw, run, services.reentry, accepted)
    return Answer.of(verdict)


def send_resumed(results: "list[Verdict]", settings: Settings, deadline: float | None = None) -> None:
    """Deliver the answers of operations finished by recovery (before `deadline`, time.monotonic())."""
    for verdict in results:
        reply = Answer.of(verdict)
        report = outbound.DeliveryReport(False, 0)
        try:
            report = send(reply, settings, deadline=deadline)
        finally:
            reply.settle(report.delivered)


def run_side_by_side(jobs: list[Callable[[], int]], deadline: float | None) -> int:
    """Run the jobs in handler threads at once and add up what they return; those still running at
    `deadline` (time.monotonic()) go on in the background and count as 0."""
    from concurrent.futures import wait

    if not jobs:
        return 0
    pool = _handler_threads()
    futures = [pool.submit(_in_context(job)) for job in jobs]
    done, _ = wait(futures, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    return sum(f.result() for f in done if f.exception() is None)


def _in_context(job: Callable[[], int]) -> Callable[[], int]:
    context = contextvars.copy_context()
    return lambda: context.run(job)


def failed_answer(event: Any, reason: str) -> Answer:
    """A FAILED answer for an event without consulting any provider (import or configuration failure)."""
    try:
        raw = decode_event(event)
    except RequestError as exc:
        return Answer(None, error=str(exc))
    public, intranet = response_urls_of(raw)
    if public is None and intranet is None:
        return Answer(None, error=f"no ResponseURL to report: {reason}")
    return Answer(failed_body_from_raw(raw, reason), None, public, intranet)


def send_failed(event: Any, reason: str, settings: Settings) -> Outcome:
    """Answer FAILED without a provider (the provider failed to import, a misconfiguration, no
    usable store) and send it; without a ResponseURL, log why nothing could be sent."""
    result = failed_answer(event, reason)
    if result.body is None:
        _log.error("request cannot be answered", extra={"fields": {"error": result.error, "reason": reason}})
        return Outcome(None, False, result.error)
    return Outcome.of(result, send(result, settings))
