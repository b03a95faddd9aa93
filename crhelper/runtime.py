"""One request, one response: decode, dispatch under the deadline guard, deliver exactly once."""

from __future__ import annotations

import contextvars
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from . import outbound
from .config import Settings
from .dispatch import dispatch, failed_for
from .errors import RequestError
from .logs import get_logger, request_context
from .registry import Registry
from .request import Request, decode_event, parse_request, response_urls_of
from .response import encode, failed_body_from_raw

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


def _run_with_deadline(work: Callable[[], dict[str, Any]], wait_seconds: float) -> dict[str, Any] | None:
    """Run `work` in a worker thread; None if it is still running after `wait_seconds` (its result is dropped)."""
    outcome: list[dict[str, Any]] = []
    context = contextvars.copy_context()
    worker = threading.Thread(target=lambda: outcome.append(context.run(work)), name="crhelper-handler", daemon=True)
    worker.start()
    worker.join(max(0.0, wait_seconds))
    return outcome[0] if outcome else None


def answer(
    registry: Registry,
    event: Any,
    settings: Settings,
    *,
    deadline: float | None = None,
    margin: float = 0.0,
) -> Answer:
    """Compute the response for one event without sending it (the sync HTTP path sends it as its reply)."""
    try:
        raw = decode_event(event)
    except RequestError as exc:
        return Answer(None, error=str(exc))
    public, intranet = response_urls_of(raw)
    try:
        request = parse_request(raw)
    except RequestError as exc:
        if public is None and intranet is None:
            return Answer(None, error=str(exc))
        return Answer(failed_body_from_raw(raw, f"invalid request: {exc}"), None, public, intranet)

    def work() -> dict[str, Any]:
        return dispatch(registry, request, settings.default_type)

    with request_context(request.log_fields()):
        if deadline is None:
            body = work()
        else:
            body = _run_with_deadline(work, deadline - margin - time.monotonic())
            if body is None:
                _log.error("handler still running near the function deadline; answering FAILED")
                body = failed_for(
                    request,
                    "timed out: the handler was still running shortly before the Function Compute timeout; "
                    "raise the function timeout or return InProgress to continue long work in a later invocation",
                )
    return Answer(body, request, public, intranet)


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


def handle_event(
    registry: Registry,
    event: Any,
    settings: Settings,
    context: object | None = None,
) -> tuple[Answer, outbound.DeliveryReport]:
    """The whole protocol for one event. Any failure of our own still ends in a FAILED when a URL is known."""
    started = time.monotonic()
    timeout = function_timeout(context)
    deadline = started + timeout if timeout else None
    margin = guard_margin(timeout, settings.timeout_margin) if timeout else 0.0
    try:
        result = answer(registry, event, settings, deadline=deadline, margin=margin)
    except Exception as exc:  # a bug of ours must not leave the stack waiting
        _log.exception("internal error while handling a request")
        result = failure_answer(event, f"internal error in crhelper: {type(exc).__name__}: {exc}")
    if result.body is None:
        _log.error("request cannot be answered", extra={"fields": {"error": result.error}})
        return result, outbound.DeliveryReport(False, 0, error=result.error)
    report = send(result, settings, deadline=(deadline - 0.2) if deadline else None)
    return result, report


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
