"""Drives one provider in-process, request by request, and records everything a contract check needs.

Each call gets fresh ResponseURLs on a real local `ResponseServer`; the harness times the call,
waits for the answer the provider posts there (through every continuation of a long operation,
within the budget), reads it with the server's protocol violations, captures what the provider
wrote to its logs, stdout and stderr, counts polls, and can observe calls of registered handlers.
`PollCounter` and `await_answer` also serve `crhelper invoke`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..constants import IN_PROGRESS_LOG_MESSAGE
from ..emulator.protocol import StackContext, build_request
from ..local.response_server import Capture, ResponseServer
from ..logs import LOGGER_NAME, JsonFormatter, redact_url
from ..provider import Provider
from ..request import Request

#: The record crhelper/lifecycle.py logs (INFO, fields attempt, delay, via) each time a handler
#: returns InProgress and its next call is scheduled: one per poll.
IN_PROGRESS_RECORD = IN_PROGRESS_LOG_MESSAGE


class PollCounter(logging.Handler):
    """Counts the framework's "operation in progress" records per RequestId: a long operation's polls,
    seen as its logs show them, from whichever thread runs the continuation."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._fields = JsonFormatter()
        self._counts: Counter[str] = Counter()
        self._counting = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() != IN_PROGRESS_RECORD:
            return
        try:  # the request's fields live in the logging context; the formatter is their public reader
            request_id = json.loads(self._fields.format(record)).get("RequestId")
        except ValueError:
            request_id = None
        with self._counting:
            self._counts[str(request_id or "")] += 1

    def polls(self, request_id: str | None = None) -> int:
        """Polls of one request, or of all requests when None."""
        with self._counting:
            return sum(self._counts.values()) if request_id is None else self._counts[request_id]

    @staticmethod
    def visible() -> bool:
        """Whether the framework's log level lets the records through (CRHELPER_LOG_LEVEL at most INFO)."""
        return logging.getLogger(LOGGER_NAME).isEnabledFor(logging.INFO)

    def attach(self) -> None:
        logging.getLogger(LOGGER_NAME).addHandler(self)

    def detach(self) -> None:
        logging.getLogger(LOGGER_NAME).removeHandler(self)

    @contextlib.contextmanager
    def attached(self) -> Iterator["PollCounter"]:
        self.attach()
        try:
            yield self
        finally:
            self.detach()


def await_answer(server: ResponseServer, request_id: str, until: float, *,
                 tick: Callable[[], None] | None = None, every: float = math.inf) -> bool:
    """Wait until `server` has accepted an answer to `request_id` or `until` (time.monotonic())
    passes, calling `tick` every `every` seconds meanwhile; whether an answer came."""
    next_tick = time.monotonic() + every
    while True:
        now = time.monotonic()
        if now >= until:
            return False
        try:
            server.wait_for(request_id, timeout=max(0.0, min(until, next_tick) - now))
            return True
        except TimeoutError:
            if tick is not None and time.monotonic() >= next_tick:
                tick()
                next_tick += every


def in_progress(outcome: Any) -> bool:
    """Whether `Provider.process` came back with nothing to send now and no error: the operation
    continues (or the request was a duplicate already answered)."""
    return getattr(outcome, "body", None) is None and not getattr(outcome, "error", None)


@dataclass
class Call:
    """One request and what came of it."""

    request: dict[str, Any]
    seconds: float
    answer: dict[str, Any] | None
    violations: list[str]
    finished: bool
    error: str | None = None
    #: The first call answered nothing yet (InProgress): the answer came from its continuations.
    in_progress: bool = False

    @property
    def status(self) -> str | None:
        return (self.answer or {}).get("Status")

    @property
    def physical_id(self) -> str | None:
        return (self.answer or {}).get("PhysicalResourceId")

    def summary(self) -> str:
        """What came back, for a FAIL detail line."""
        if not self.finished:
            return f"no answer within the time budget ({self.seconds:.1f} s)"
        if self.answer is None:
            return f"no accepted answer at the ResponseURL{': ' + self.error if self.error else ''}"
        reason = f" ({self.answer.get('Reason')})" if self.status == "FAILED" else ""
        return f"{self.status}{reason}, PhysicalResourceId {self.physical_id!r}"


class _Capture(logging.Handler):
    def __init__(self, sink: io.StringIO) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.write(self.format(record) + "\n")


@dataclass
class HandlerCall:
    """One call of an observed handler: the Request it was given (None when it does not take one)
    and what it returned (unset while it runs or when it raised)."""

    request: Request | None
    returned: Any = None


@dataclass
class Harness:
    """`with Harness(provider, "Custom::X") as h: call = h.send("Create", props)`."""

    provider: Any
    resource_type: str
    budget: float = 60.0
    logical_id: str = "ContractResource"
    server: ResponseServer = field(default_factory=ResponseServer)
    calls: list[Call] = field(default_factory=list)
    output: io.StringIO = field(default_factory=io.StringIO)
    polls: PollCounter = field(default_factory=PollCounter)

    def __post_init__(self) -> None:
        stack_id = f"contract-{uuid.uuid4()}"
        self.context = StackContext(stack_id, "contract", "cn-hangzhou", "123456789")

    def __enter__(self) -> "Harness":
        self.server.start()
        self.polls.attach()  # for the harness's whole life: a continuation may poll between two deliveries
        return self

    def __exit__(self, *exc: object) -> None:
        self.polls.detach()
        self.server.stop()

    def request(self, request_type: str, properties: dict[str, Any], physical_id: str | None = None,
                old: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ROS request for the resource under test, with fresh ResponseURLs."""
        event = build_request(self.context, request_type, self.logical_id, self.resource_type, properties, physical_id, old)
        return self.server.attach(event)

    def send(self, request_type: str, properties: dict[str, Any], physical_id: str | None = None,
             old: dict[str, Any] | None = None) -> Call:
        return self.deliver(self.request(request_type, properties, physical_id, old))

    def answers(self, event: dict[str, Any]) -> list[Capture]:
        """Every attempt to answer `event` that reached its ResponseURLs, in order of arrival."""
        token = event["ResponseURL"].split("?", 1)[0].rsplit("/", 1)[-1]
        return [c for c in list(self.server.captures) if c.token == token]

    def deliver(self, event: dict[str, Any]) -> Call:
        """Hand `event` to the provider and wait (up to the budget) for it to return, and when a
        crhelper Provider answered nothing yet (InProgress), for the answer of its continuations."""
        outcome: list[BaseException | None] = []
        pending: list[bool] = []

        def work() -> None:
            try:
                if isinstance(self.provider, Provider):
                    pending.append(in_progress(self.provider.process(dict(event))))
                else:
                    self.provider.handle(dict(event))
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - a raising provider is a finding, not a crash
                outcome.append(exc)

        started = time.monotonic()
        answered = True
        with self._captured():
            worker = threading.Thread(target=work, name="contract-call", daemon=True)
            worker.start()
            worker.join(self.budget)
            if outcome and pending and pending[0]:
                answered = await_answer(self.server, str(event.get("RequestId")), started + self.budget)
        seconds = time.monotonic() - started
        captures = self.answers(event)
        accepted = [c for c in captures if c.status == 200]
        violations: list[str] = []
        for capture in captures:
            violations.extend(v for v in capture.violations if v not in violations)
        error = None
        if outcome and outcome[0] is not None:
            error = f"provider raised {type(outcome[0]).__name__}: {outcome[0]}"
            for key in ("ResponseURL", "IntranetResponseURL"):  # the report must not carry a presigned URL
                if event.get(key):
                    error = error.replace(event[key], redact_url(event[key]))
        answer = accepted[-1].body if accepted else None
        call = Call(event, seconds, answer, violations, finished=bool(outcome) and answered, error=error,
                    in_progress=bool(pending and pending[0]))
        self.calls.append(call)
        return call

    @contextlib.contextmanager
    def _captured(self) -> Iterator[None]:
        """Everything the provider writes while handling: logging records, stdout and stderr."""
        handler = _Capture(self.output)
        root = logging.getLogger()
        framework = logging.getLogger("crhelper")
        root.addHandler(handler)
        framework.addHandler(handler)
        try:
            with contextlib.redirect_stdout(self.output), contextlib.redirect_stderr(self.output):
                yield
        finally:
            root.removeHandler(handler)
            framework.removeHandler(handler)

    @contextlib.contextmanager
    def observing(self, operation: str) -> Iterator[list[HandlerCall]]:
        """Record each call of the provider's registered handler for `operation`, continuations
        included (crhelper Providers only; for others the list stays empty)."""
        calls: list[HandlerCall] = []
        registry = getattr(self.provider, "registry", None)
        registration = registry.get(self.resource_type, operation) if registry is not None else None
        if registration is None:
            yield calls
            return
        registration.shape  # resolve the handler's signature before the stand-in replaces it
        original = registration.func

        def observed(*args: Any, **kwargs: Any) -> Any:
            call = HandlerCall(next((a for a in args if isinstance(a, Request)), None))
            calls.append(call)
            call.returned = original(*args, **kwargs)
            return call.returned

        registration.func = observed
        try:
            yield calls
        finally:
            registration.func = original

    def leaked(self, secrets: dict[str, str]) -> list[str]:
        """Which ResponseURLs (or their signatures) and secret values appear in the captured output."""
        text = self.output.getvalue()
        found = []
        for call in self.calls:
            for key in ("ResponseURL", "IntranetResponseURL"):
                url = call.request.get(key, "")
                query = url.split("?", 1)[1] if "?" in url else ""
                signature = query.split("Signature=", 1)[1].split("&", 1)[0] if "Signature=" in query else ""
                if (url and url in text) or (signature and signature in text):
                    found.append(f"a ResponseURL (or its signature) of the {call.request['RequestType']} request")
        for name, value in secrets.items():
            if value and value in text:
                found.append(f"the value of secret property {name}")
        return sorted(set(found))
