"""Drives one provider in-process, request by request, and records everything a contract check needs.

Each call gets fresh ResponseURLs on a real local `ResponseServer`; the harness times the call,
reads the answer the provider posted there (with the server's protocol violations), captures what
the provider wrote to its logs, stdout and stderr, and can count calls of registered handlers.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..emulator.protocol import StackContext, build_request
from ..local.response_server import ResponseServer
from ..logs import JsonFormatter, redact_url


@dataclass
class Call:
    """One request and what came of it."""

    request: dict[str, Any]
    seconds: float
    answer: dict[str, Any] | None
    violations: list[str]
    finished: bool
    error: str | None = None

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
class Harness:
    """`with Harness(provider, "Custom::X") as h: call = h.send("Create", props)`."""

    provider: Any
    resource_type: str
    budget: float = 60.0
    logical_id: str = "ContractResource"
    server: ResponseServer = field(default_factory=ResponseServer)
    calls: list[Call] = field(default_factory=list)
    output: io.StringIO = field(default_factory=io.StringIO)

    def __post_init__(self) -> None:
        stack_id = f"contract-{uuid.uuid4()}"
        self.context = StackContext(stack_id, "contract", "cn-hangzhou", "123456789")
        self._lock = threading.Lock()

    def __enter__(self) -> "Harness":
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def request(self, request_type: str, properties: dict[str, Any], physical_id: str | None = None,
                old: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ROS request for the resource under test, with fresh ResponseURLs."""
        event = build_request(self.context, request_type, self.logical_id, self.resource_type, properties, physical_id, old)
        return self.server.attach(event)

    def send(self, request_type: str, properties: dict[str, Any], physical_id: str | None = None,
             old: dict[str, Any] | None = None) -> Call:
        return self.deliver(self.request(request_type, properties, physical_id, old))

    def deliver(self, event: dict[str, Any]) -> Call:
        """Hand `event` to the provider and wait (up to the budget) for it to return."""
        outcome: list[BaseException | None] = []

        def work() -> None:
            try:
                self.provider.handle(dict(event))
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - a raising provider is a finding, not a crash
                outcome.append(exc)

        started = time.monotonic()
        with self._captured():
            worker = threading.Thread(target=work, name="contract-call", daemon=True)
            worker.start()
            worker.join(self.budget)
        seconds = time.monotonic() - started
        token = event["ResponseURL"].split("?", 1)[0].rsplit("/", 1)[-1]
        captures = [c for c in list(self.server.captures) if c.token == token]
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
        call = Call(event, seconds, answer, violations, finished=bool(outcome), error=error)
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
    def counting(self, operation: str) -> Iterator[list[int]]:
        """Count calls of the provider's registered handler for `operation` (crhelper Providers only)."""
        counter = [0]
        registry = getattr(self.provider, "registry", None)
        registration = registry.get(self.resource_type, operation) if registry is not None else None
        if registration is None:
            yield counter
            return
        registration.shape  # resolve the handler's signature before the stand-in replaces it
        original = registration.func

        def counted(*args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return original(*args, **kwargs)

        registration.func = counted
        try:
            yield counter
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
