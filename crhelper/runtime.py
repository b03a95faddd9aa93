"""One request, one response: decode, dispatch under the deadline guard, deliver exactly once."""

from __future__ import annotations

import contextvars
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from . import outbound
from .config import Settings
from .dispatch import dispatch, failed_for
from .reentry import continuation_id_of
from .errors import RequestError
from .logs import get_logger, request_context
from .registry import Registry
from .request import Request, decode_event, parse_request, response_urls_of
from .response import InProgress, encode, failed_body_from_raw

if TYPE_CHECKING:
    from .lifecycle import Lifecycle
    from .reentry import Reentry

_log = get_logger("runtime")


@dataclass(frozen=True)
class Answer:
    """The response body for one event and where it goes; body is None when no answer is possible."""

    body: dict[str, Any] | None
    request: Request | None = None
    public_url: str | None = None
    intranet_url: str | None = None
    error: str | None = None


def function_timeout(context: object | None) -> float | None:
    """The Function Compute function timeout in seconds, from an FC context (object or dict form)."""
    if context is None:
        return None
    function = getattr(context, "function", None)
    if function is None and isinstance(context, Mapping):
        function = context.get("function")
    timeout = getattr(function, "timeout", None)
    if timeout is None and isinstance(function, Mapping):
        timeout = function.get("timeout")
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if timeout is None and callable(remaining):
        return float(remaining()) / 1000.0
    try:
        return float(timeout) if timeout is not None else None
    except (TypeError, ValueError):
        return None


def guard_margin(timeout: float, configured: float | None) -> float:
    """How long before the deadline we stop waiting: enough to deliver FAILED, never most of the budget."""
    if configured is not None:
        return min(configured, timeout * 0.5)
    return min(5.0, max(0.5, timeout * 0.1))


@functools.lru_cache(maxsize=1)
def _handler_threads() -> Any:
    """Threads that run handlers under a deadline, reused across warm invocations (a new thread per
    request costs more than the rest of the framework). One that overruns keeps its thread; the pool
    grows past it."""
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=64, thread_name_prefix="crhelper-handler")


def _run_with_deadline(work: Callable[[], Any], wait_seconds: float) -> Any:
    """Run `work` in a handler thread; None if it is still running after `wait_seconds` (its result is dropped)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    future = _handler_threads().submit(contextvars.copy_context().run, work)
    try:
        return future.result(timeout=max(0.0, wait_seconds))
    except FutureTimeout:
        return None


def guarded_runner(
    registry: Registry, settings: Settings, deadline: float | None, margin: float
) -> Callable[[Request], "dict[str, Any] | InProgress"]:
    """A function that runs one handler call, answering FAILED "timed out" if it runs into `deadline - margin`."""

    def run(request: Request) -> "dict[str, Any] | InProgress":
        def work() -> "dict[str, Any] | InProgress":
            return dispatch(registry, request, settings.default_type)

        with request_context(request.log_fields()):
            if deadline is None:
                return work()
            outcome = _run_with_deadline(work, deadline - margin - time.monotonic())
            if outcome is None:
                _log.error("handler still running near the function deadline; answering FAILED")
                return failed_for(
                    request,
                    "timed out: the handler was still running shortly before the Function Compute timeout; "
                    "raise the function timeout or return InProgress to continue long work in a later invocation",
                )
            return outcome

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


def answer(
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
    guarded = guarded_runner(registry, settings, deadline, margin)

    def run(request: Request) -> dict[str, Any]:
        """An in-band reply cannot be continued later: InProgress becomes a FAILED that says so."""
        outcome = guarded(request)
        if isinstance(outcome, InProgress):
            return failed_for(request, "the handler returned InProgress but this delivery path replies in-band "
                                       "and cannot call it again later; use an asynchronous ServiceToken")
        return outcome

    if lifecycle is not None:
        with request_context(request.log_fields()):
            body = lifecycle.process_in_band(request, run, deadline - margin if deadline is not None else None)
        return Answer(body, request, public, intranet)
    return Answer(run(request), request, public, intranet)


def send(answer_: Answer, settings: Settings, deadline: float | None = None) -> outbound.DeliveryReport:
    """Deliver an answer's body once (with bounded retries inside)."""
    if answer_.body is None:
        return outbound.DeliveryReport(False, 0, error=answer_.error)
    fields = answer_.request.log_fields() if answer_.request else {}
    with request_context(fields):
        return outbound.deliver(
            encode(answer_.body),
            answer_.public_url,
            answer_.intranet_url,
            settings.delivery,
            on_function_compute=settings.on_function_compute,
            deadline=deadline,
        )


@dataclass(frozen=True)
class Services:
    """What long-running and idempotent handling needs; None parts turn that feature off."""

    lifecycle: "Lifecycle | None" = None
    reentry: "Reentry | None" = None


def handle_event(
    registry: Registry,
    event: Any,
    settings: Settings,
    context: object | None = None,
    services: Services | None = None,
    started: float | None = None,
) -> tuple[Answer, outbound.DeliveryReport]:
    """The whole protocol for one event. Any failure of our own still ends in a FAILED when a URL is known."""
    started = time.monotonic() if started is None else started
    timeout = function_timeout(context)
    deadline = started + timeout if timeout else None
    margin = guard_margin(timeout, settings.timeout_margin) if timeout else 0.0
    services = services or Services()
    try:
        result = _process(registry, event, settings, services, guarded_runner(registry, settings, deadline, margin))
    except Exception as exc:  # a bug of ours (or an unreachable store) must not leave the stack waiting
        _log.exception("internal error while handling a request")
        result = failure_answer(event, f"internal error in crhelper: {type(exc).__name__}: {exc}")
    if result.body is None:
        if result.error:
            _log.error("request cannot be answered", extra={"fields": {"error": result.error}})
        return result, outbound.DeliveryReport(False, 0, error=result.error)
    report = send(result, settings, deadline=(deadline - 0.2) if deadline else None)
    return result, report


def _process(
    registry: Registry, event: Any, settings: Settings, services: Services, run: Callable[[Request], Any]
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
        if resumed is None:
            return Answer(None)
        request, body = resumed
        return Answer(body, request, request.response_url, request.intranet_response_url)
    parsed = _parse(raw)
    if isinstance(parsed, Answer):
        return parsed
    request = parsed
    public, intranet = request.response_url, request.intranet_response_url
    if services.lifecycle is None:
        outcome = run(request)
        if isinstance(outcome, InProgress):
            outcome = failed_for(request, "the handler returned InProgress but long-running operations need a store; "
                                          "unset CRHELPER_STORE (it is none) or set it to a store URL")
        return Answer(outcome, request, public, intranet)
    with request_context(request.log_fields()):
        to_send = services.lifecycle.process(request, raw, run, services.reentry)
    return Answer(to_send, request, public, intranet)


def send_resumed(results: list[tuple[Request, dict[str, Any]]], settings: Settings) -> None:
    """Deliver the answers of operations finished by recovery."""
    for request, body in results:
        send(Answer(body, request, request.response_url, request.intranet_response_url), settings)


def failure_answer(event: Any, reason: str) -> Answer:
    """A FAILED answer for an event without consulting any provider (import or configuration failure)."""
    try:
        raw = decode_event(event)
    except RequestError as exc:
        return Answer(None, error=str(exc))
    public, intranet = response_urls_of(raw)
    if public is None and intranet is None:
        return Answer(None, error=f"no ResponseURL to report: {reason}")
    return Answer(failed_body_from_raw(raw, reason), None, public, intranet)


def answer_failure(event: Any, reason: str, settings: Settings) -> tuple[Answer, outbound.DeliveryReport]:
    """Answer FAILED without a provider (e.g. the provider module failed to import) and send it."""
    result = failure_answer(event, reason)
    if result.body is None:
        _log.error("request cannot be answered", extra={"fields": {"error": result.error, "reason": reason}})
        return result, outbound.DeliveryReport(False, 0, error=result.error)
    return result, send(result, settings)
